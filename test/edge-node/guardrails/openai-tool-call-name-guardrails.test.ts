// Output rules over the names of an OpenAI chat answer's tool calls, the rule Anthropic's tool_use
// names follow: a name one of the caller's tools declares (`tools[].function.name`,
// `tools[].custom.name`, the legacy `functions[].name`) is the caller's own and left alone (a mask
// would rename the function its client dispatches on); any other name is text the model made up —
// it can be told to "call" a tool named after what it should not say — and is checked like content,
// masked (placeholders without brackets, so a name of [a-zA-Z0-9_-] stays one) or blocking, in JSON
// answers and streams (`tool_calls[].function.name`, `delta.tool_calls[].function.name`, a custom
// call's `custom.name`, the legacy `function_call.name`). Before, every name went out unchecked.
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { sdkError } from '../pipeline/pipeline-harness.js';
import { rawChatStream, startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';
import { chatAnswerWith } from './odd-chat-shape-fixtures.js';

const SECRET = 'sk-proj-Abc123Def456Ghi789Jkl0';
const RULES: GuardrailRule[] = [
  { detector: 'email', action: 'mask', on: 'output' },
  { detector: 'secret', action: 'block', on: 'output' },
];
/** The caller's own tool names hold an e-mail address: the rules never check what the caller declared. */
const OWN_TOOL = 'mail_bob@example.com';
const OWN_CUSTOM = 'grep_for_bob@example.com';
const TOOLS = [
  { type: 'function' as const, function: { name: OWN_TOOL, parameters: { type: 'object', properties: {} } } },
  { type: 'custom' as const, custom: { name: OWN_CUSTOM } },
];
const USER = [{ role: 'user' as const, content: 'go' }];

const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const callStart = (index: number, name: string, args = '{}'): string =>
  chunk({ ...(index === 0 ? { role: 'assistant' } : {}), tool_calls: [{ index, id: `call_${index}`, type: 'function', function: { name, arguments: args } }] });
const DONE = 'data: [DONE]\n\n';

function answerWith(message: Record<string, unknown>): { json: unknown } {
  return chatAnswerWith(message, 'tool_calls');
}

interface StreamedCall {
  index: number;
  function?: { name?: string; arguments?: string };
}

t.test('output rules over OpenAI tool call names', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, RULES);
  const client = node.client();
  const ask = { model: 'echo', messages: USER, tools: TOOLS };

  await t.test('in a JSON answer, a function or custom tool name none of the caller’s tools has is masked, the caller’s own are left as they are', async (t) => {
    upstream.answer = answerWith({
      tool_calls: [
        { id: 'call_0', type: 'function', function: { name: 'to eve@example.org', arguments: '{"cc":"dan@example.net"}' } },
        { id: 'call_1', type: 'function', function: { name: OWN_TOOL, arguments: '{}' } },
        { id: 'call_2', type: 'custom', custom: { name: 'ask eve@example.org', input: 'hi' } },
        { id: 'call_3', type: 'custom', custom: { name: OWN_CUSTOM, input: 'hi' } },
      ],
    });
    const reply = await client.chat.completions.create(ask);
    const calls = reply.choices[0]!.message.tool_calls!;
    t.same(
      calls.map((call) => (call.type === 'function' ? call.function.name : call.custom.name)),
      ['to EMAIL', OWN_TOOL, 'ask EMAIL', OWN_CUSTOM],
      'placeholders without brackets, as in a message name',
    );
    t.equal(calls[0]!.type === 'function' ? calls[0]!.function.arguments : '', '{"cc":"[EMAIL]"}', 'the arguments are checked as before');
  });

  await t.test('in a JSON answer, a legacy function_call name is left alone when the caller’s functions declare it, masked when not', async (t) => {
    upstream.answer = answerWith({ function_call: { name: OWN_TOOL, arguments: '{}' } });
    const own = await client.chat.completions.create({ model: 'echo', messages: USER, functions: [{ name: OWN_TOOL, parameters: { type: 'object', properties: {} } }] });
    t.equal(own.choices[0]!.message.function_call?.name, OWN_TOOL);
    const invented = await client.chat.completions.create({ model: 'echo', messages: USER });
    t.equal(invented.choices[0]!.message.function_call?.name, 'EMAIL', 'no functions declared: the model made it up (the placeholder without brackets)');
  });

  await t.test('in a JSON answer, a secret as an invented tool name blocks the answer, none of it sent', async (t) => {
    upstream.answer = answerWith({ tool_calls: [{ id: 'call_0', type: 'function', function: { name: SECRET, arguments: '{}' } }] });
    const err = await sdkError(client.chat.completions.create(ask));
    t.equal(err.status, 400);
    t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.notMatch(JSON.stringify(err.error), /sk-proj/);
  });

  await t.test('in a stream, an invented tool name is masked in its chunk, the caller’s own left as it is, and the SDK assembles both calls', async (t) => {
    upstream.answer = { sse: [callStart(0, 'to eve@example.org', '{"a":'), chunk({ tool_calls: [{ index: 0, function: { arguments: '1}' } }] }), callStart(1, OWN_TOOL), chunk({}, 'tool_calls'), DONE] };
    const completion = await client.chat.completions.stream(ask).finalChatCompletion();
    const calls = completion.choices[0]!.message.tool_calls!;
    t.same(calls.map((call) => (call.type === 'function' ? [call.function.name, call.function.arguments] : [])), [['to EMAIL', '{"a":1}'], [OWN_TOOL, '{}']]);
    const { body } = await rawChatStream(node, node.secret, ask);
    t.notMatch(body, /eve@/, 'no part of the address goes out');
    const names = sseData(body)
      .filter((data) => data !== '[DONE]')
      .flatMap((data) => (JSON.parse(data) as { choices: Array<{ delta: { tool_calls?: StreamedCall[] } }> }).choices.flatMap((c) => c.delta.tool_calls ?? []))
      .flatMap((call) => (call.function?.name === undefined ? [] : [call.function.name]));
    t.same(names, ['to EMAIL', OWN_TOOL], 'each name in the chunk that brought it');
  });

  await t.test('in a stream, a secret as an invented tool name ends the stream with the guardrail code, none of it sent', async (t) => {
    upstream.answer = { sse: [callStart(0, SECRET), chunk({}, 'tool_calls'), DONE] };
    const { status, body } = await rawChatStream(node, node.secret, ask);
    t.equal(status, 200, 'the stream had started');
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /sk-proj|Abc123/);
  });

  await t.test('in a stream, invented custom and legacy function_call names are masked too', async (t) => {
    upstream.answer = {
      sse: [
        chunk({ tool_calls: [{ index: 0, id: 'call_0', type: 'custom', custom: { name: 'ask eve@example.org', input: 'hi' } }] }),
        chunk({ tool_calls: [{ index: 1, id: 'call_1', type: 'custom', custom: { name: OWN_CUSTOM, input: 'ho' } }] }),
        chunk({}, 'tool_calls'),
        DONE,
      ],
    };
    const custom = await rawChatStream(node, node.secret, ask);
    t.notMatch(custom.body, /eve@/);
    t.match(custom.body, /"name":"ask EMAIL"/);
    t.match(custom.body, new RegExp(`"name":"${OWN_CUSTOM}"`));
    upstream.answer = { sse: [chunk({ function_call: { name: 'to eve@example.org', arguments: '{}' } }), chunk({}, 'function_call'), DONE] };
    const legacy = await rawChatStream(node, node.secret, { model: 'echo', messages: USER });
    t.notMatch(legacy.body, /eve@/);
    t.match(legacy.body, /"name":"to EMAIL"/);
  });

  await t.test('without output rules an invented name passes as it came', async (t) => {
    upstream.answer = { sse: [callStart(0, 'to eve@example.org'), chunk({}, 'tool_calls'), DONE] };
    const { body } = await rawChatStream(node, plainSecret, ask);
    t.match(body, /"name":"to eve@example.org"/);
  });
});
