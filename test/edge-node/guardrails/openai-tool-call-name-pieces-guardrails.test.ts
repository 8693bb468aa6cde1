// An OpenAI tool call's name streamed in pieces is checked as the joined name (openai-python's
// stream helper joins name deltas): under output rules each call's name is held until its
// arguments start, another call of its choice starts or the choice finishes, then checked whole and
// sent in one delta. Before, each piece was checked alone: `to eve@exa` + `mple.org` went out
// unmasked and `aur` + `ora` passed a block rule for `aurora`. Names, calls and `tool_calls` of a
// shape OpenAI never sends (a name object whose string sits under `type`, `tool_calls` as an object,
// `function` or `function_call` as an array, a name at the top level of a call, a numeric name)
// went out unchecked: they are checked in JSON answers and blocked in streams.
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { sdkError } from '../pipeline/pipeline-harness.js';
import { rawChatStream, startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';
import { chatAnswerWith } from './odd-chat-shape-fixtures.js';

const RULES: GuardrailRule[] = [
  { detector: 'email', action: 'mask', on: 'output' },
  { detector: 'phone', action: 'mask', on: 'output' },
  { detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'output' },
];
const OWN_TOOL = 'mail_bob@example.com';
const TOOLS = [{ type: 'function' as const, function: { name: OWN_TOOL, parameters: { type: 'object', properties: {} } } }];
const USER = [{ role: 'user' as const, content: 'go' }];
const ASK = { model: 'echo', messages: USER, tools: TOOLS };

const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const call = (index: number, fn: Record<string, unknown>, first = false): string =>
  chunk({ ...(first && index === 0 ? { role: 'assistant' } : {}), tool_calls: [{ index, ...(first ? { id: `call_${index}`, type: 'function' } : {}), function: fn }] });
const DONE = 'data: [DONE]\n\n';

function answerWith(message: Record<string, unknown>): { json: unknown } {
  return chatAnswerWith(message, 'tool_calls');
}

/** The name fields of every tool call delta in a raw stream, in order. */
function streamedNames(body: string): Array<[number, string]> {
  return sseData(body)
    .filter((data) => data !== '[DONE]' && data.startsWith('{'))
    .flatMap((data) => (JSON.parse(data) as { choices: Array<{ delta: { tool_calls?: Array<{ index: number; function?: { name?: string } }> } }> }).choices.flatMap((c) => c.delta.tool_calls ?? []))
    .flatMap((c): Array<[number, string]> => (c.function?.name === undefined ? [] : [[c.index, c.function.name]]));
}

t.test('OpenAI tool call names in pieces and of odd shapes under output rules', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, RULES);
  const client = node.client();

  await t.test('a made-up name split across chunks is masked as the joined name and goes out whole in one delta', async (t) => {
    upstream.answer = {
      sse: [call(0, { name: 'to eve@exa', arguments: '' }, true), call(0, { name: 'mple.org', arguments: '' }), call(0, { arguments: '{"a":1}' }), chunk({}, 'tool_calls'), DONE],
    };
    const { body } = await rawChatStream(node, node.secret, ASK);
    t.notMatch(body, /eve@|mple\.org/, 'no piece of the address goes out');
    t.same(streamedNames(body), [[0, 'to EMAIL']], 'the whole masked name, once');
    const completion = await client.chat.completions.stream(ASK).finalChatCompletion();
    const fn = completion.choices[0]!.message.tool_calls![0]!;
    t.same(fn.type === 'function' ? [fn.function.name, fn.function.arguments] : [], ['to EMAIL', '{"a":1}'], 'the SDK assembles the call');
  });

  await t.test('a made-up name whose pieces join into a blocked keyword blocks the stream, none of it sent', async (t) => {
    upstream.answer = { sse: [call(0, { name: 'aur', arguments: '' }, true), call(0, { name: 'ora' }), call(0, { arguments: '{}' }), chunk({}, 'tool_calls'), DONE] };
    const { status, body } = await rawChatStream(node, node.secret, ASK);
    t.equal(status, 200);
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /"name":"aur|"name":"ora/);
  });

  await t.test('a name ended by the next call or by the finish goes out whole before it', async (t) => {
    upstream.answer = {
      sse: [call(0, { name: 'to eve@exa' }, true), call(0, { name: 'mple.org' }), call(1, { name: 'ask dan@exa' }, true), call(1, { name: 'mple.net' }), chunk({}, 'tool_calls'), DONE],
    };
    const { body } = await rawChatStream(node, node.secret, ASK);
    t.notMatch(body, /eve@|dan@|mple\./);
    t.same(streamedNames(body), [[0, 'to EMAIL'], [1, 'ask EMAIL']]);
    const completion = await client.chat.completions.stream(ASK).finalChatCompletion();
    t.same(
      completion.choices[0]!.message.tool_calls!.map((c) => (c.type === 'function' ? c.function.name : '')),
      ['to EMAIL', 'ask EMAIL'],
    );
  });

  await t.test('a declared name split across chunks is the caller’s own: it goes out whole, unmasked', async (t) => {
    upstream.answer = { sse: [call(0, { name: 'mail_bob@exa', arguments: '' }, true), call(0, { name: 'mple.com' }), call(0, { arguments: '{}' }), chunk({}, 'tool_calls'), DONE] };
    const { body } = await rawChatStream(node, node.secret, ASK);
    t.same(streamedNames(body), [[0, OWN_TOOL]]);
  });

  await t.test('a legacy function_call name in pieces is masked as the joined name', async (t) => {
    upstream.answer = { sse: [chunk({ function_call: { name: 'to eve@exa' } }), chunk({ function_call: { name: 'mple.org' } }), chunk({ function_call: { arguments: '{}' } }), chunk({}, 'function_call'), DONE] };
    const { body } = await rawChatStream(node, node.secret, { model: 'echo', messages: USER });
    t.notMatch(body, /eve@|mple\.org/);
    t.equal(body.match(/"name":"[^"]*"/g)?.join(), '"name":"to EMAIL"', 'the whole masked name, once');
  });

  await t.test('without output rules name pieces pass as they came', async (t) => {
    upstream.answer = { sse: [call(0, { name: 'to eve@exa', arguments: '' }, true), call(0, { name: 'mple.org' }), chunk({}, 'tool_calls'), DONE] };
    const { body } = await rawChatStream(node, plainSecret, ASK);
    t.same(streamedNames(body), [[0, 'to eve@exa'], [0, 'mple.org']]);
  });

  const ODD_STREAM: Array<[string, Record<string, unknown>]> = [
    ['a name object whose string is under `type`', { tool_calls: [{ index: 0, id: 'call_0', type: 'function', function: { name: { type: 'aurora' }, arguments: '{}' } }] }],
    ['tool_calls as an object', { tool_calls: { index: 0, function: { name: 'aurora' } } }],
    ['function as an array', { tool_calls: [{ index: 0, id: 'call_0', type: 'function', function: [{ name: 'aurora' }] }] }],
    ['custom as an array', { tool_calls: [{ index: 0, id: 'call_0', type: 'custom', custom: ['aurora'] }] }],
    ['function_call as an array', { function_call: [{ name: 'aurora' }] }],
    ['a name at the top level of the call', { tool_calls: [{ index: 0, id: 'call_0', type: 'function', name: 'aurora', function: { arguments: '{}' } }] }],
    ['a numeric name', { tool_calls: [{ index: 0, id: 'call_0', type: 'function', function: { name: 13912345678, arguments: '{}' } }] }],
  ];
  for (const [what, delta] of ODD_STREAM) {
    await t.test(`in a stream, ${what} is blocked, none of it sent`, async (t) => {
      upstream.answer = { sse: [chunk(delta), chunk({}, 'tool_calls'), DONE] };
      const { body } = await rawChatStream(node, node.secret, ASK);
      t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
      t.notMatch(body, /aurora|13912345678/);
    });
  }

  const ODD_JSON: Array<[string, Record<string, unknown>]> = [
    ['a name object whose string is under `type`', { tool_calls: [{ id: 'call_0', type: 'function', function: { name: { type: 'aurora' }, arguments: '{}' } }] }],
    ['tool_calls as an object', { tool_calls: { id: 'call_0', function: { name: 'aurora' } } }],
    ['function as an array', { tool_calls: [{ id: 'call_0', type: 'function', function: [{ name: 'aurora' }] }] }],
    ['function_call as an array', { function_call: [{ name: 'aurora' }] }],
    ['a name at the top level of the call', { tool_calls: [{ id: 'call_0', type: 'function', name: 'aurora', function: { name: OWN_TOOL, arguments: '{}' } }] }],
  ];
  for (const [what, message] of ODD_JSON) {
    await t.test(`in a JSON answer, ${what} is checked: a blocked keyword in it blocks the answer`, async (t) => {
      upstream.answer = answerWith(message);
      const err = await sdkError(client.chat.completions.create(ASK));
      t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
      t.notMatch(JSON.stringify(err.error), /aurora/);
    });
  }

  await t.test('in a JSON answer, a numeric name is checked as its digits and masked', async (t) => {
    upstream.answer = answerWith({ tool_calls: [{ id: 'call_0', type: 'function', function: { name: 13912345678, arguments: '{}' } }] });
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
      body: JSON.stringify(ASK),
    });
    const text = await res.text();
    t.notMatch(text, /13912345678/);
    t.match(text, /"name":"PHONE"/);
  });
});
