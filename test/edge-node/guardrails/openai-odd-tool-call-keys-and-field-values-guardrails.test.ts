// Keys the node does not read on an OpenAI chat tool call of a known type (`function`, `custom`),
// inside its `function` / `custom` object and on a legacy `function_call`, and values of the
// message fields the node reads as strings (`reasoning`, `reasoning_content`, `refusal`, `name`)
// that are not strings. An unknown key's strings are checked as unknown message fields are (in a
// request and a JSON answer: masked in place or blocking; in a stream, where they cannot be placed
// in a running text, output rules end the stream). A field value of a shape OpenAI never sends — a
// non-string `reasoning`, `refusal` or `name`, `function` or `custom` not an object, a tool name or
// a custom input that is not a string — has every string and number in it checked as an odd shape
// (masked without brackets), and blocks a stream chunk under output rules. Ids, type tags, declared
// names, `index` and the thought signatures Gemini and LiteLLM put beside a call (opaque, sent
// back as they came) stay unchecked, and without rules everything goes on as it came.
import t from 'tap';
import type { GuardrailRule, RequestRecord } from '../../../proto/src/index.js';
import { rawChatStream, startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';

const USER = [{ role: 'user' as const, content: 'go' }];
const DONE = 'data: [DONE]\n\n';
/** The caller's tools: their names are the model's to repeat, never checked. */
const TOOLS = [
  { type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } },
  { type: 'custom', custom: { name: 'grep' } },
];
/** A call's id, type tags and declared names, each a keyword of a block rule: none of them is checked. */
const KNOWN_WORDS = ['call_0', 'call_1', 'function', 'custom', 'lookup', 'grep'];

const rules = (on: GuardrailRule['on']): GuardrailRule[] => [
  { detector: 'email', action: 'mask', on },
  { detector: 'phone', action: 'mask', on },
  { detector: 'keywords', keywords: ['aurora'], action: 'block', on },
  { detector: 'keywords', keywords: KNOWN_WORDS, action: 'block', on },
];

const FUNCTION_CALL = { id: 'call_0', type: 'function', function: { name: 'lookup', arguments: '{"q":"weather"}' } };
const CUSTOM_CALL = { id: 'call_1', type: 'custom', custom: { name: 'grep', input: 'weather' } };
/**
 * Thought signatures as Gemini's OpenAI-compatible API (`extra_content.google`) and LiteLLM
 * (`provider_specific_fields`, on the call and its function) put them: opaque, never checked, so
 * even a blocked keyword in one passes.
 */
const SIGNED_CALL = {
  ...FUNCTION_CALL,
  function: { ...FUNCTION_CALL.function, provider_specific_fields: { thought_signature: 'CiQB/aurora+sig/fn==' } },
  extra_content: { google: { thought_signature: 'CiQB/aurora+sig==' } },
  provider_specific_fields: { thought_signature: 'CiQB/aurora+sig/litellm==' },
};

/** Assistant messages whose only text of note is `aurora`, in a place the node did not read. */
const ODD_MESSAGES: Array<Record<string, unknown>> = [
  { tool_calls: [{ ...FUNCTION_CALL, note: 'aurora' }] },
  { tool_calls: [{ ...CUSTOM_CALL, note: 'aurora' }] },
  { tool_calls: [{ ...FUNCTION_CALL, extra_content: { deep: ['aurora'] } }] },
  { tool_calls: [{ ...FUNCTION_CALL, extra_content: { google: { thought_signature: 'CiQB', note: 'aurora' } } }] },
  { tool_calls: [{ ...FUNCTION_CALL, provider_specific_fields: { thought_signature: { text: 'aurora' } } }] },
  { tool_calls: [{ ...FUNCTION_CALL, function: { ...FUNCTION_CALL.function, note: 'aurora' } }] },
  { tool_calls: [{ ...CUSTOM_CALL, custom: { ...CUSTOM_CALL.custom, note: { deep: 'aurora' } } }] },
  { tool_calls: [{ ...FUNCTION_CALL, function: 'aurora' }] },
  { tool_calls: [{ ...CUSTOM_CALL, custom: ['aurora'] }] },
  { tool_calls: [{ ...FUNCTION_CALL, function: { name: { x: 'aurora' }, arguments: '{}' } }] },
  { tool_calls: [{ ...CUSTOM_CALL, custom: { name: 'grep', input: { x: 'aurora' } } }] },
  { function_call: { name: 'lookup', arguments: '{}', note: 'aurora' } },
  { function_call: { name: ['aurora'], arguments: '{}' } },
  { content: 'ok', reasoning: { x: 'aurora' } },
  { content: 'ok', reasoning_content: { x: ['aurora'] } },
  { content: 'ok', refusal: ['aurora'] },
  { content: 'ok', name: { x: 'aurora' } },
];

/** An assistant message in the shapes OpenAI sends, every field the node reads present. */
const ORDINARY: Record<string, unknown> = {
  role: 'assistant',
  content: null,
  refusal: null,
  reasoning: 'thinking it over',
  tool_calls: [
    { index: 0, ...FUNCTION_CALL },
    { index: 1, ...CUSTOM_CALL },
    { index: 2, ...SIGNED_CALL },
  ],
};

function answerWith(message: Record<string, unknown>): { json: unknown } {
  return {
    json: {
      id: 'chatcmpl-1',
      object: 'chat.completion',
      created: 1,
      model: 'demo-echo',
      choices: [{ index: 0, message: { role: 'assistant', content: null, ...message }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 },
    },
  };
}
const OK = answerWith({ content: 'ok' });

const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

async function post(node: { baseURL: string }, secret: string, body: Record<string, unknown>): Promise<{ status: number; text: string; requestId: string | null }> {
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
    body: JSON.stringify({ model: 'echo', tools: TOOLS, ...body }),
  });
  return { status: res.status, text: await res.text(), requestId: res.headers.get('x-request-id') };
}

/** The messages the upstream last received. */
function forwardedMessages(upstream: { requests: Array<{ body: unknown }> }): Array<Record<string, unknown>> {
  return (upstream.requests.at(-1)!.body as { messages: Array<Record<string, unknown>> }).messages;
}

function answerMessage(text: string): Record<string, unknown> {
  return (JSON.parse(text) as { choices: Array<{ message: Record<string, unknown> }> }).choices[0]!.message;
}

t.test("a request's tool call with keys the node does not read, its function or custom object with such keys or not an object, a non-string tool name or custom input, and a non-string reasoning, refusal or name are checked by input rules: a blocked keyword refuses the request before the upstream is called, e-mail addresses and phone numbers are masked; ordinary tool calls keep their ids, types, names and thought signatures unchecked, and without input rules everything is forwarded as it came", async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, rules('input'));
  upstream.answer = OK;

  for (const fields of ODD_MESSAGES) {
    const sent = upstream.requests.length;
    const res = await post(node, node.secret, { messages: [...USER, { role: 'assistant', content: null, ...fields }] });
    t.equal(res.status, 400, JSON.stringify(fields));
    t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(res.text, /aurora/);
    t.equal(upstream.requests.length, sent, 'the upstream was never called');
  }

  const masked = {
    role: 'assistant',
    content: null,
    refusal: ['to eve@example.org', 13912345678],
    name: { first: 'eve@example.org' },
    tool_calls: [
      { ...FUNCTION_CALL, note: 'to eve@example.org', function: { ...FUNCTION_CALL.function, extra: { to: 'eve@example.org' } } },
      { ...CUSTOM_CALL, custom: 'to eve@example.org' },
    ],
  };
  t.equal((await post(node, node.secret, { messages: [...USER, masked] })).status, 200);
  t.same(
    forwardedMessages(upstream)[1],
    {
      role: 'assistant',
      content: null,
      refusal: ['to EMAIL', 'PHONE'],
      name: { first: 'EMAIL' },
      tool_calls: [
        { ...FUNCTION_CALL, note: 'to [EMAIL]', function: { ...FUNCTION_CALL.function, extra: { to: '[EMAIL]' } } },
        { ...CUSTOM_CALL, custom: 'to EMAIL' },
      ],
    },
    'unknown keys masked as unknown message fields are, odd shapes without brackets',
  );

  const ordinary = [...USER, ORDINARY, { role: 'assistant', content: null, function_call: { name: 'lookup', arguments: '{}' } }, { role: 'tool', tool_call_id: 'call_0', content: 'sunny' }];
  t.equal((await post(node, node.secret, { messages: ordinary })).status, 200, 'no id, type tag, name, index or thought signature was checked');
  t.same(forwardedMessages(upstream), ordinary, 'forwarded as they came');

  for (const fields of ODD_MESSAGES) {
    const odd = [...USER, { role: 'assistant', content: null, ...fields }];
    t.equal((await post(node, plainSecret, { messages: odd })).status, 200, 'the schema takes the shape');
    t.same(forwardedMessages(upstream), odd, 'without input rules it is forwarded as it came');
  }
});

t.test("a JSON answer's tool call with keys the node does not read, its function or custom object with such keys or not an object, a non-string tool name or custom input, and a non-string reasoning, refusal or name are checked by output rules: a blocked keyword blocks the answer, e-mail addresses are masked; an ordinary answer, thought signatures included, goes out as it came, and without output rules everything passes", async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, rules('output'));

  for (const message of ODD_MESSAGES) {
    upstream.answer = answerWith(message);
    const res = await post(node, node.secret, { messages: USER });
    t.equal(res.status, 400, JSON.stringify(message));
    t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(res.text, /aurora/);

    upstream.answer = answerWith(message);
    const plain = await post(node, plainSecret, { messages: USER });
    t.equal(plain.status, 200, 'without output rules it passes');
    t.same(answerMessage(plain.text), { role: 'assistant', content: null, ...message });
  }

  upstream.answer = answerWith({
    reasoning: { summary: 'to eve@example.org' },
    tool_calls: [
      { ...FUNCTION_CALL, note: 'to eve@example.org' },
      { ...CUSTOM_CALL, custom: { ...CUSTOM_CALL.custom, extra: ['eve@example.org'] } },
    ],
  });
  const masked = await post(node, node.secret, { messages: USER });
  t.equal(masked.status, 200);
  t.notMatch(masked.text, /eve@/);
  t.same(answerMessage(masked.text), {
    role: 'assistant',
    content: null,
    reasoning: { summary: 'to EMAIL' },
    tool_calls: [
      { ...FUNCTION_CALL, note: 'to [EMAIL]' },
      { ...CUSTOM_CALL, custom: { ...CUSTOM_CALL.custom, extra: ['[EMAIL]'] } },
    ],
  });

  for (const message of [ORDINARY, { role: 'assistant', content: null, function_call: { name: 'lookup', arguments: '{}' } }]) {
    upstream.answer = answerWith(message);
    const res = await post(node, node.secret, { messages: USER });
    t.equal(res.status, 200, 'no id, type tag, declared name, index or thought signature was checked');
    t.same(answerMessage(res.text), message, 'as it came');
  }
});

t.test('a streamed tool call fragment with keys the node does not read (on the call, in its function or custom object, on a function_call), a non-string custom input, and a non-string reasoning or refusal end the stream under output rules, none of it sent; an ordinary tool-call stream, Gemini’s and LiteLLM’s thought signatures included, goes on, and without output rules they pass byte for byte', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, rules('output'));
  const ask = { model: 'echo', messages: USER, tools: TOOLS };

  for (const delta of [
    { tool_calls: [{ index: 0, ...FUNCTION_CALL, note: 'aurora' }] },
    { tool_calls: [{ index: 0, ...FUNCTION_CALL, extra_content: { google: { thought_signature: 'CiQB', note: 'aurora' } } }] },
    { tool_calls: [{ index: 0, ...CUSTOM_CALL, note: { deep: 'aurora' } }] },
    { tool_calls: [{ index: 0, ...FUNCTION_CALL, function: { ...FUNCTION_CALL.function, note: 'aurora' } }] },
    { tool_calls: [{ index: 0, ...CUSTOM_CALL, custom: { ...CUSTOM_CALL.custom, note: ['aurora'] } }] },
    { tool_calls: [{ index: 0, ...CUSTOM_CALL, custom: { name: 'grep', input: { x: 'aurora' } } }] },
    { function_call: { name: 'lookup', arguments: '{}', note: 'aurora' } },
    { reasoning: { x: 'aurora' } },
    { reasoning_content: ['aurora'] },
    { refusal: ['aurora'] },
  ]) {
    const sse = [chunk({ role: 'assistant', content: 'Looking.' }), chunk(delta), chunk({}, 'tool_calls'), DONE];
    upstream.answer = { sse };
    const { status, body } = await rawChatStream(node, node.secret, ask);
    t.equal(status, 200, 'the stream had started');
    t.match(sseData(body).at(-1), /ZN_ERR_GUARDRAIL_BLOCKED/, `${JSON.stringify(delta)}: ended with the guardrail error event`);
    t.notMatch(body, /aurora/, 'nothing of it was sent');
    t.notMatch(body, /\[DONE\]/);

    upstream.answer = { sse };
    const plain = await rawChatStream(node, plainSecret, ask);
    t.same(sseData(plain.body), sse.map((event) => event.slice('data: '.length, -2)), 'without output rules: as it came');
  }

  upstream.answer = {
    sse: [
      chunk({ role: 'assistant', content: null, refusal: null, reasoning: 'thinking it over' }),
      chunk({ tool_calls: [{ index: 0, id: 'call_0', type: 'function', function: { name: 'look', arguments: '' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { name: 'up' } }] }),
      chunk({ tool_calls: [{ index: 0, type: null, function: { arguments: '{"q":"weather"}' } }] }),
      chunk({ tool_calls: [{ index: 1, ...CUSTOM_CALL }] }),
      chunk({ tool_calls: [{ index: 2, ...SIGNED_CALL }] }),
      chunk({}, 'tool_calls'),
      DONE,
    ],
  };
  const { body } = await rawChatStream(node, node.secret, ask);
  t.notMatch(body, /ZN_ERR_GUARDRAIL/, 'no id, type tag, declared name, index or thought signature was checked');
  t.match(body, /"name":"lookup"/);
  t.match(body, /"input":"weather"/);
  t.match(body, /"extra_content":\{"google":\{"thought_signature":"CiQB\/aurora\+sig=="\}\}/, 'the signature went out as it came');
  t.match(body, /data: \[DONE\]\n\n$/);
});

t.test('a flag rule counts a match once in an unknown key of a tool call, in a non-string tool name, function or custom, and in a non-string reasoning, refusal or name, in a JSON answer and in a request', async (t) => {
  const records: RequestRecord[] = [];
  const spool = { open: () => undefined, finalise: async (record: RequestRecord) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'flag', on: 'both' }], { spool });
  const matches = async (requestId: string | null, on: 'input' | 'output'): Promise<number | undefined> => {
    const deadline = Date.now() + 5_000;
    let record: RequestRecord | undefined;
    while ((record = records.find((r) => r.requestId === requestId)) === undefined) {
      if (Date.now() > deadline) throw new Error(`no record of ${String(requestId)}`);
      await new Promise((resolve) => setImmediate(resolve));
    }
    return record.guardrails.find((verdict) => verdict.on === on)?.matches;
  };

  const messages: Array<Record<string, unknown>> = [
    { tool_calls: [{ ...FUNCTION_CALL, note: 'to eve@example.org' }] },
    { tool_calls: [{ ...FUNCTION_CALL, function: { ...FUNCTION_CALL.function, note: 'to eve@example.org' } }] },
    { tool_calls: [{ ...FUNCTION_CALL, function: { name: { x: 'to eve@example.org' }, arguments: '{}' } }] },
    { tool_calls: [{ ...FUNCTION_CALL, function: 'to eve@example.org' }] },
    { tool_calls: [{ ...CUSTOM_CALL, custom: ['to eve@example.org'] }] },
    { function_call: { name: { x: 'to eve@example.org' }, arguments: '{}' } },
    { content: 'ok', reasoning: { x: 'to eve@example.org' } },
    { content: 'ok', refusal: ['to eve@example.org'] },
    { content: 'ok', name: { x: 'to eve@example.org' } },
  ];
  for (const message of messages) {
    upstream.answer = answerWith(message);
    const res = await post(node, node.secret, { messages: USER });
    t.equal(res.status, 200);
    t.equal(await matches(res.requestId, 'output'), 1, `answer: ${JSON.stringify(message)}`);
  }
  upstream.answer = OK;
  for (const message of messages) {
    const res = await post(node, node.secret, { messages: [...USER, { role: 'assistant', content: null, ...message }] });
    t.equal(res.status, 200);
    t.equal(await matches(res.requestId, 'input'), 1, `request: ${JSON.stringify(message)}`);
  }
});
