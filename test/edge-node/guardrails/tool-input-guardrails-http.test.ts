// Tool-call input through a listening node (a scripted upstream, real HTTP): what is forwarded or
// delivered is what the rules checked (duplicate keys, JSON string literals, arguments cut short),
// every Anthropic `*_tool_use` block's input is checked, and a key without a policy pays no walk
// over its history's tool-call arguments.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import { ESCAPED_TOOL_SECRET, TOOL_RULES, TOOL_SECRET } from './guardrail-fixtures.js';
import { anthropicSdkError } from '../anthropic-fixtures.js';
import { startGuardedNode } from './guarded-node.js';


const chatAnswer = (args: string): { json: unknown } => ({
  json: {
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 1,
    model: 'echo',
    choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'f', arguments: args } }] }, finish_reason: 'tool_calls' }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  },
});
const anthropicAnswer = (content: unknown[]): { json: unknown } => ({
  json: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content, stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 5, output_tokens: 7 } },
});
const historyWith = (args: string): unknown[] => [
  { role: 'user', content: 'hi' },
  { role: 'assistant', content: null, tool_calls: [{ id: 'c0', type: 'function', function: { name: 'f', arguments: args } }] },
  { role: 'tool', tool_call_id: 'c0', content: 'ok' },
];

interface ChatBody {
  messages?: Array<{ tool_calls?: Array<{ function: { arguments: string } }> }>;
  choices?: Array<{ message: { tool_calls?: Array<{ function: { arguments: string } }> } }>;
  error?: { code: string };
}

t.test('tool-call input through the node', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, TOOL_RULES);
  const chat = async (body: unknown, secret = node.secret): Promise<{ status: number; body: ChatBody }> => {
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as ChatBody };
  };
  const forwardedArguments = (at: number): string | undefined => (upstream.requests[at]?.body as ChatBody).messages?.[1]?.tool_calls?.[0]?.function.arguments;
  const client = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });

  await t.test('arguments with a duplicate key are forwarded as the value that was checked, not as the raw text hiding a blocked keyword', async (t) => {
    upstream.answer = chatAnswer('{}');
    const before = upstream.requests.length;
    const reply = await chat({ model: 'echo', messages: historyWith('{"q":"project aurora","q":"x"}') });
    t.equal(reply.status, 200);
    t.equal(forwardedArguments(before), '{"q":"x"}');
  });

  await t.test("a JSON answer's arguments with a duplicate key are delivered as the value that was checked", async (t) => {
    upstream.answer = chatAnswer(`{"q":"key ${TOOL_SECRET}","q":"x"}`);
    const reply = await chat({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] });
    t.equal(reply.status, 200);
    t.equal(reply.body.choices?.[0]?.message.tool_calls?.[0]?.function.arguments, '{"q":"x"}');
  });

  await t.test("a secret written with a JSON escape in a JSON answer's arguments that are a string literal, or JSON cut short, is blocked", async (t) => {
    const cases: Array<[string, string]> = [
      ['string literal', JSON.stringify(`key ${TOOL_SECRET}`).replace('A', '\\u0041')],
      ['cut short', `{"q":"key ${ESCAPED_TOOL_SECRET}`],
    ];
    for (const [what, args] of cases) {
      upstream.answer = chatAnswer(args);
      const reply = await chat({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] });
      t.equal(reply.status, 400, what);
      t.equal(reply.body.error?.code, 'ZN_ERR_GUARDRAIL_BLOCKED', what);
    }
  });

  await t.test('an e-mail written with a JSON escape in request arguments cut short is masked in what the upstream receives', async (t) => {
    upstream.answer = chatAnswer('{}');
    const before = upstream.requests.length;
    const reply = await chat({ model: 'echo', messages: historyWith('{"to":"bob\\u0040example.com') });
    t.equal(reply.status, 200);
    t.equal(forwardedArguments(before), '{"to":"[EMAIL]');
  });

  await t.test('without a policy, tool-call arguments are neither parsed nor rewritten, either way', async (t) => {
    const args = '{ "q" : "project aurora", "q": "x", "to": "bob@example.com" }';
    upstream.answer = chatAnswer(args);
    const before = upstream.requests.length;
    const parse = JSON.parse;
    let parses = 0;
    JSON.parse = ((source: string, reviver?: Parameters<typeof JSON.parse>[1]) => {
      if (source === args) parses += 1;
      return parse(source, reviver) as unknown;
    }) as typeof JSON.parse;
    let reply: { status: number; body: ChatBody };
    try {
      reply = await chat({ model: 'echo', messages: historyWith(args) }, plainSecret);
    } finally {
      JSON.parse = parse;
    }
    t.equal(reply.status, 200);
    t.equal(parses, 0, 'no walk parsed the arguments');
    t.equal(forwardedArguments(before), args, 'forwarded byte for byte');
    t.equal(reply.body.choices?.[0]?.message.tool_calls?.[0]?.function.arguments, args, 'delivered byte for byte');
  });

  await t.test("a secret in a JSON answer's server_tool_use input blocks it, and an e-mail in its mcp_tool_use input is masked", async (t) => {
    upstream.answer = anthropicAnswer([{ type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: { query: `key ${TOOL_SECRET}` } }]);
    const err = await anthropicSdkError(client.messages.create({ model: 'claude', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }));
    t.equal(err.errorCode, 'ZN_ERR_GUARDRAIL_BLOCKED');
    upstream.answer = anthropicAnswer([{ type: 'mcp_tool_use', id: 'mcptoolu_1', name: 'send', server_name: 'mail', input: { to: 'bob@example.com' } }]);
    const res = await fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret },
      body: JSON.stringify({ model: 'claude', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }),
    });
    t.equal(res.status, 200);
    const message = (await res.json()) as { content: Array<{ input?: unknown }> };
    t.same(message.content[0]?.input, { to: '[EMAIL]' });
  });

  await t.test("an e-mail in a request's server_tool_use or mcp_tool_use input is masked in what the upstream receives", async (t) => {
    upstream.answer = anthropicAnswer([{ type: 'text', text: 'ok' }]);
    const before = upstream.requests.length;
    const res = await fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret },
      body: JSON.stringify({
        model: 'claude',
        max_tokens: 100,
        messages: [
          { role: 'user', content: 'hi' },
          {
            role: 'assistant',
            content: [
              { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: { query: 'bob@example.com' } },
              { type: 'mcp_tool_use', id: 'mcptoolu_1', name: 'send', server_name: 'mail', input: { to: 'eve@example.org' } },
            ],
          },
          { role: 'user', content: 'thanks' },
        ],
      }),
    });
    t.equal(res.status, 200);
    const sent = upstream.requests[before]?.body as { messages: Array<{ content: Array<{ input?: unknown }> }> };
    t.same(sent.messages[1]?.content.map((block) => block.input), [{ query: '[EMAIL]' }, { to: '[EMAIL]' }]);
  });

  const sendMessages = (content: unknown[]): Promise<Response> =>
    fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret },
      body: JSON.stringify({ model: 'claude', max_tokens: 100, messages: [{ role: 'user', content }] }),
    });

  await t.test("a secret in a request's mcp_tool_result, search_result or document text is refused before the upstream sees it", async (t) => {
    upstream.answer = anthropicAnswer([{ type: 'text', text: 'ok' }]);
    const before = upstream.requests.length;
    const carriers: unknown[] = [
      { type: 'mcp_tool_result', tool_use_id: 'mcptoolu_1', content: [{ type: 'text', text: `key ${TOOL_SECRET}` }] },
      { type: 'search_result', source: 'https://example.com', title: 'notes', content: [{ type: 'text', text: `key ${TOOL_SECRET}` }] },
      { type: 'document', source: { type: 'text', media_type: 'text/plain', data: `key ${TOOL_SECRET}` } },
      { type: 'document', source: { type: 'content', content: [{ type: 'text', text: `key ${TOOL_SECRET}` }] } },
      { type: 'document', title: `key ${TOOL_SECRET}`, source: { type: 'text', media_type: 'text/plain', data: 'fine' } },
    ];
    for (const block of carriers) {
      const res = await sendMessages([block, { type: 'text', text: 'summarise' }]);
      t.equal(res.status, 400, JSON.stringify(block).slice(0, 60));
      t.equal(((await res.json()) as { error: { type: string; message: string } }).error.type, 'invalid_request_error');
    }
    t.equal(upstream.requests.length, before, 'none reached the upstream');
  });

  await t.test("an e-mail in a document's text is masked in what the upstream receives, and one in an answer's mcp_tool_result text is masked for the caller", async (t) => {
    upstream.answer = anthropicAnswer([{ type: 'text', text: 'ok' }]);
    const before = upstream.requests.length;
    const res = await sendMessages([{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'write to bob@example.com' } }]);
    t.equal(res.status, 200);
    const sent = upstream.requests[before]?.body as { messages: Array<{ content: Array<{ source: { data: string } }> }> };
    t.equal(sent.messages[0]?.content[0]?.source.data, 'write to [EMAIL]');
    upstream.answer = anthropicAnswer([{ type: 'mcp_tool_result', tool_use_id: 'mcptoolu_1', is_error: false, content: [{ type: 'text', text: 'sent to eve@example.org' }] }]);
    const answered = await sendMessages([{ type: 'text', text: 'hi' }]);
    t.equal(answered.status, 200);
    const message = (await answered.json()) as { content: Array<{ content: Array<{ text: string }> }> };
    t.equal(message.content[0]?.content[0]?.text, 'sent to [EMAIL]');
  });
});
