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
import type { GuardrailRule } from '../../../proto/src/index.js';
import { rawChatStream, startGuardedNode } from './guarded-node.js';
import { SSE_DONE, USER_GO, answerMessage, chatAnswerWith, chatChunkEvent, checkFlagCountsOnceInAnswersAndRequests, checkOddAnswersBlockedUnderOutputRules, checkOddRequestsForwardedWithoutRules, checkOddRequestsRefusedBeforeTheUpstream, checkStreamedDeltaEndsTheStream, forwardedMessages, postChat, recordedGuardrailMatches } from './odd-chat-shape-fixtures.js';

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

const OK = chatAnswerWith({ content: 'ok' });
/** An assistant message sent back with `fields` (content null unless they say). */
const assistantWith = (fields: Record<string, unknown>): Record<string, unknown> => ({ role: 'assistant', content: null, ...fields });

/** A chat completion with `body` and the caller's TOOLS, read raw. */
const post = (node: { baseURL: string }, secret: string, body: Record<string, unknown>): ReturnType<typeof postChat> => postChat(node, secret, { tools: TOOLS, ...body });

t.test("a request's tool call with keys the node does not read, its function or custom object with such keys or not an object, a non-string tool name or custom input, and a non-string reasoning, refusal or name are checked by input rules: a blocked keyword refuses the request before the upstream is called, e-mail addresses and phone numbers are masked; ordinary tool calls keep their ids, types, names and thought signatures unchecked, and without input rules everything is forwarded as it came", async (t) => {
  const guarded = await startGuardedNode(t, rules('input'));
  const { upstream, node } = guarded;
  upstream.answer = OK;

  await checkOddRequestsRefusedBeforeTheUpstream(t, guarded, ODD_MESSAGES, assistantWith, post);

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
  t.equal((await post(node, node.secret, { messages: [...USER_GO, masked] })).status, 200);
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

  const ordinary = [...USER_GO, ORDINARY, { role: 'assistant', content: null, function_call: { name: 'lookup', arguments: '{}' } }, { role: 'tool', tool_call_id: 'call_0', content: 'sunny' }];
  t.equal((await post(node, node.secret, { messages: ordinary })).status, 200, 'no id, type tag, name, index or thought signature was checked');
  t.same(forwardedMessages(upstream), ordinary, 'forwarded as they came');

  await checkOddRequestsForwardedWithoutRules(t, guarded, ODD_MESSAGES, assistantWith, post);
});

t.test("a JSON answer's tool call with keys the node does not read, its function or custom object with such keys or not an object, a non-string tool name or custom input, and a non-string reasoning, refusal or name are checked by output rules: a blocked keyword blocks the answer, e-mail addresses are masked; an ordinary answer, thought signatures included, goes out as it came, and without output rules everything passes", async (t) => {
  const guarded = await startGuardedNode(t, rules('output'));
  const { upstream, node } = guarded;

  await checkOddAnswersBlockedUnderOutputRules(t, guarded, ODD_MESSAGES, post);

  upstream.answer = chatAnswerWith({
    reasoning: { summary: 'to eve@example.org' },
    tool_calls: [
      { ...FUNCTION_CALL, note: 'to eve@example.org' },
      { ...CUSTOM_CALL, custom: { ...CUSTOM_CALL.custom, extra: ['eve@example.org'] } },
    ],
  });
  const masked = await post(node, node.secret, { messages: USER_GO });
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
    upstream.answer = chatAnswerWith(message);
    const res = await post(node, node.secret, { messages: USER_GO });
    t.equal(res.status, 200, 'no id, type tag, declared name, index or thought signature was checked');
    t.same(answerMessage(res.text), message, 'as it came');
  }
});

t.test('a streamed tool call fragment with keys the node does not read (on the call, in its function or custom object, on a function_call), a non-string custom input, and a non-string reasoning or refusal end the stream under output rules, none of it sent; an ordinary tool-call stream, Gemini’s and LiteLLM’s thought signatures included, goes on, and without output rules they pass byte for byte', async (t) => {
  const guarded = await startGuardedNode(t, rules('output'));
  const { upstream, node } = guarded;
  const ask = { model: 'echo', messages: USER_GO, tools: TOOLS };

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
    await checkStreamedDeltaEndsTheStream(t, guarded, ask, delta, { finish: 'tool_calls', label: JSON.stringify(delta), hidden: /aurora/, hiddenWhat: 'nothing of it was sent' });
  }

  upstream.answer = {
    sse: [
      chatChunkEvent({ role: 'assistant', content: null, refusal: null, reasoning: 'thinking it over' }),
      chatChunkEvent({ tool_calls: [{ index: 0, id: 'call_0', type: 'function', function: { name: 'look', arguments: '' } }] }),
      chatChunkEvent({ tool_calls: [{ index: 0, function: { name: 'up' } }] }),
      chatChunkEvent({ tool_calls: [{ index: 0, type: null, function: { arguments: '{"q":"weather"}' } }] }),
      chatChunkEvent({ tool_calls: [{ index: 1, ...CUSTOM_CALL }] }),
      chatChunkEvent({ tool_calls: [{ index: 2, ...SIGNED_CALL }] }),
      chatChunkEvent({}, 'tool_calls'),
      SSE_DONE,
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
  const { spool, matches } = recordedGuardrailMatches();
  const guarded = await startGuardedNode(t, [{ detector: 'email', action: 'flag', on: 'both' }], { spool });

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
  await checkFlagCountsOnceInAnswersAndRequests(t, guarded, matches, messages, assistantWith, post);
});
