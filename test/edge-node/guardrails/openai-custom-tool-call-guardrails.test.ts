// Guardrails over OpenAI custom ("freeform") tool calls, `{type:'custom', custom:{name, input}}`,
// through a listening node with the official openai client and a scripted upstream: `custom.input`
// is plain text (not JSON, unlike a function's arguments), checked like content in requests, JSON
// answers and streams (a running text per call, so a match split across fragments is still found
// and masks keep the chunks valid). A tool call of any other type fails closed, as a content part
// of an unknown type does.
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { sdkError } from '../pipeline/pipeline-harness.js';
import { rawChatStream, startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';
import { chatAnswerWith } from './odd-chat-shape-fixtures.js';

const EMAIL = 'bob@example.com';
const SECRET = 'sk-proj-Abc123Def456Ghi789Jkl0';
const RULES: GuardrailRule[] = [
  { detector: 'email', action: 'mask', on: 'both' },
  { detector: 'secret', action: 'block', on: 'both' },
];
const TOOLS = [{ type: 'custom' as const, custom: { name: 'run_sql' } }];
const USER = [{ role: 'user' as const, content: 'fix the user table' }];
const DONE = 'data: [DONE]\n\n';

const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
/** A custom tool call's fragment; the first one (with `name`) carries its id and name. */
const customFragment = (index: number, input: string, name?: string): string =>
  chunk({ tool_calls: [name === undefined ? { index, custom: { input } } : { index, id: `call_${index}`, type: 'custom', custom: { name, input } }] });

function answerWith(toolCalls: unknown[]): { json: unknown } {
  return chatAnswerWith({ tool_calls: toolCalls }, 'tool_calls');
}
const OK = { json: { id: 'c', object: 'chat.completion', created: 1, model: 'demo-echo', choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'ok' } }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } } };

type ToolCallDelta = { index: number; id?: string; type?: string; custom?: { name?: string; input?: string } };

t.test('guardrails over OpenAI custom tool calls', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, RULES);
  const client = node.client();
  const streamBody = (secret: string): Promise<{ status: number; body: string }> => rawChatStream(node, secret, { model: 'echo', messages: USER, tools: TOOLS });
  const history = (call: Record<string, unknown>): never =>
    [...USER, { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', ...call }] }, { role: 'tool', tool_call_id: 'call_0', content: 'done' }] as never;

  await t.test("an e-mail in a JSON answer's custom.input is masked as plain text; a secret there blocks the answer", async (t) => {
    upstream.answer = answerWith([
      { id: 'call_0', type: 'custom', custom: { name: 'run_sql', input: `UPDATE users SET email='${EMAIL}'` } },
      { id: 'call_1', type: 'custom', custom: { name: 'run_sql', input: 'SELECT 1' } },
    ]);
    const reply = await client.chat.completions.create({ model: 'echo', messages: USER, tools: TOOLS });
    const inputs = reply.choices[0]!.message.tool_calls!.map((call) => (call.type === 'custom' ? call.custom.input : null));
    t.same(inputs, ["UPDATE users SET email='[EMAIL]'", 'SELECT 1']);

    upstream.answer = answerWith([{ id: 'call_0', type: 'custom', custom: { name: 'run_sql', input: `UPDATE users SET api_key='${SECRET}'` } }]);
    const err = await sdkError(client.chat.completions.create({ model: 'echo', messages: USER, tools: TOOLS }));
    t.equal(err.status, 400);
    t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.notMatch(JSON.stringify(err.error), /sk-proj/);
  });

  await t.test("a request's custom tool call is checked: an e-mail masked in what the upstream receives, a secret refused before anything reaches it", async (t) => {
    upstream.answer = OK;
    await client.chat.completions.create({ model: 'echo', tools: TOOLS, messages: history({ type: 'custom', custom: { name: 'run_sql', input: `mail ${EMAIL}` } }) });
    const sent = upstream.requests.at(-1)!.body as { messages: Array<{ tool_calls?: Array<{ custom: { name: string; input: string } }> }> };
    t.same(sent.messages[1]!.tool_calls![0]!.custom, { name: 'run_sql', input: 'mail [EMAIL]' });

    const before = upstream.requests.length;
    const err = await sdkError(client.chat.completions.create({ model: 'echo', tools: TOOLS, messages: history({ type: 'custom', custom: { name: 'run_sql', input: `key ${SECRET}` } }) }));
    t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.equal(upstream.requests.length, before, 'the upstream was never called');
  });

  await t.test('streamed custom.input fragments are masked across fragment boundaries, each call its own text, in chunks that stay valid', async (t) => {
    upstream.answer = {
      sse: [
        chunk({ role: 'assistant', content: null }),
        customFragment(0, '', 'run_sql'),
        customFragment(0, "UPDATE users SET email='bob@exa"),
        customFragment(0, "mple.com'"),
        customFragment(1, 'SELECT * FROM t WHERE m = "car', 'run_sql'),
        customFragment(1, 'ol@example.com"'),
        chunk({}, 'tool_calls'),
        DONE,
      ],
    };
    const stream = await client.chat.completions.create({ model: 'echo', stream: true, messages: USER, tools: TOOLS });
    const inputs: string[] = [];
    const names: string[] = [];
    for await (const part of stream) {
      for (const call of (part.choices[0]?.delta.tool_calls ?? []) as ToolCallDelta[]) {
        inputs[call.index] = (inputs[call.index] ?? '') + (call.custom?.input ?? '');
        if (call.custom?.name !== undefined) names[call.index] = call.custom.name;
      }
    }
    t.same(inputs, ["UPDATE users SET email='[EMAIL]'", 'SELECT * FROM t WHERE m = "[EMAIL]"']);
    t.same(names, ['run_sql', 'run_sql'], 'the calls keep their names');

    upstream.answer = { sse: [customFragment(0, 'mail bob@exa', 'run_sql'), customFragment(0, 'mple.com now'), chunk({}, 'tool_calls'), DONE] };
    const { body } = await streamBody(node.secret);
    t.notMatch(body, /example/);
    t.match(body, /data: \[DONE\]\n\n$/);
  });

  await t.test('a secret split across streamed custom.input fragments ends the stream with the guardrail code, none of it sent', async (t) => {
    upstream.answer = { sse: [customFragment(0, 'key sk-pr', 'run_sql'), customFragment(0, 'oj-Abc123Def456Ghi789Jkl0;'), chunk({}, 'tool_calls'), DONE] };
    const { status, body } = await streamBody(node.secret);
    t.equal(status, 200, 'the stream had started');
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /sk-pr|Abc123/);
    t.notMatch(body, /\[DONE\]/);
  });

  await t.test('a tool call of an unknown type has every string checked in a request and a JSON answer', async (t) => {
    upstream.answer = answerWith([{ id: 'call_0', type: 'web_lookup', web_lookup: { query: `who is ${EMAIL}`, hints: [`not ${EMAIL}`] } }]);
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
      body: JSON.stringify({ model: 'echo', messages: USER }),
    });
    const answer = (await res.json()) as { choices: Array<{ message: { tool_calls: Array<{ web_lookup: unknown }> } }> };
    t.same(answer.choices[0]!.message.tool_calls[0]!.web_lookup, { query: 'who is [EMAIL]', hints: ['not [EMAIL]'] });

    upstream.answer = answerWith([{ id: 'call_0', type: 'web_lookup', web_lookup: { query: `key ${SECRET}` } }]);
    t.equal((await sdkError(client.chat.completions.create({ model: 'echo', messages: USER }))).code, 'ZN_ERR_GUARDRAIL_BLOCKED');

    upstream.answer = OK;
    const before = upstream.requests.length;
    const err = await sdkError(client.chat.completions.create({ model: 'echo', messages: history({ type: 'web_lookup', web_lookup: { query: [`key ${SECRET}`] } }) }));
    t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.equal(upstream.requests.length, before, 'the upstream was never called');
  });

  await t.test('a streamed tool call of an unknown type carrying text is blocked under output rules, also when its text comes in later fragments', async (t) => {
    // The second call's first fragment has an empty type (unknown, but no text: it goes out), so
    // only the call's tracked unknown type blocks its later fragment, which carries no type.
    const cases = [
      { sse: [chunk({ tool_calls: [{ index: 0, id: 'call_0', type: 'web_lookup', web_lookup: { query: 'anything' } }] }), chunk({}, 'tool_calls'), DONE], firstSent: false },
      { sse: [chunk({ tool_calls: [{ index: 0, id: 'call_0', type: '' }] }), chunk({ tool_calls: [{ index: 0, web_lookup: { query: 'anything' } }] }), chunk({}, 'tool_calls'), DONE], firstSent: true },
    ];
    for (const { sse, firstSent } of cases) {
      upstream.answer = { sse };
      const { body } = await streamBody(node.secret);
      t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
      t.notMatch(body, /anything/);
      t.equal(/call_0/.test(body), firstSent, firstSent ? 'blocked at the later fragment, its first one sent' : 'blocked at the first fragment');
    }
  });

  await t.test('later function-call fragments written with every field, "type": null and "id": null (servers that serialise nulls), are read as function arguments, not as a call of an unknown type', async (t) => {
    const fragment = (args: string, first: boolean): string =>
      chunk({ tool_calls: [{ index: 0, id: first ? 'call_0' : null, type: first ? 'function' : null, function: { name: first ? 'lookup' : null, arguments: args } }] });
    upstream.answer = { sse: [fragment('', true), fragment('{"who":"bob@exa', false), fragment('mple.com"}', false), chunk({}, 'tool_calls'), DONE] };
    const { status, body } = await streamBody(node.secret);
    t.equal(status, 200);
    t.notMatch(body, /ZN_ERR_GUARDRAIL/, 'not refused as unchecked text');
    t.notMatch(body, /example\.com/);
    t.match(body, /\[EMAIL\]/, 'the address in the arguments is masked');
    t.match(body, /data: \[DONE\]\n\n$/);
  });

  await t.test('without output rules, streamed custom tool calls (and calls of unknown types) pass byte for byte', async (t) => {
    const sse = [customFragment(0, 'mail bob@exa', 'run_sql'), customFragment(0, 'mple.com now'), chunk({ tool_calls: [{ index: 1, id: 'call_1', type: 'web_lookup', web_lookup: { query: 'x' } }] }), chunk({}, 'tool_calls'), DONE];
    upstream.answer = { sse };
    const { body } = await streamBody(plainSecret);
    t.same(sseData(body), sse.map((event) => event.slice('data: '.length, -2)));
  });
});
