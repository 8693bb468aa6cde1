// Text an OpenAI chat message carries in shapes the node used to pass on unread: `reasoning_details`
// and `thinking_blocks` given as one object (not a list) or with items carrying keys beside the
// ones the node reads, known content parts (`text`, `refusal`, media) with extra keys (on the part
// or in its media payload), an `audio` whose `transcript` is not a string (and a request's audio
// at all), and `annotations` given as one object (and a request's annotations at all). In a
// request and a JSON answer they are checked like the rest (masked in place or blocking; an odd
// shape's strings masked without brackets); in a stream, where they cannot be placed in a running
// text, output rules end the stream (an annotation object, which comes whole, is checked in its
// chunk). Ids, type tags, URLs, signatures, encrypted data, an audio's id and `cache_control` stay
// unchecked, and without rules everything goes on as it came.
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { rawChatStream, startGuardedNode } from './guarded-node.js';
import { SSE_DONE, USER_GO, answerMessage, chatAnswerWith, chatChunkEvent, checkFlagCountsOnceInAnswersAndRequests, checkOddAnswersBlockedUnderOutputRules, checkOddRequestsForwardedWithoutRules, checkOddRequestsRefusedBeforeTheUpstream, checkStreamedDeltaEndsTheStream, forwardedMessages, postChat, recordedGuardrailMatches } from './odd-chat-shape-fixtures.js';

const URL = 'https://example.com/aurora.png';

const rules = (on: GuardrailRule['on']): GuardrailRule[] => [
  { detector: 'email', action: 'mask', on },
  { detector: 'keywords', keywords: ['aurora'], action: 'block', on },
];

/** Assistant messages whose only `aurora` sits in a place the node did not read. */
const ODD_MESSAGES: Array<Record<string, unknown>> = [
  { content: 'ok', reasoning_details: { type: 'reasoning.text', text: 'aurora' } },
  { content: 'ok', reasoning_details: [{ type: 'reasoning.text', text: 'ok', note: 'aurora', index: 0 }] },
  { content: 'ok', reasoning_details: [{ type: 'reasoning.summary', summary: 'ok', extra: { deep: ['aurora'] } }] },
  { content: 'ok', reasoning_details: [{ type: 'reasoning.text', text: { x: 'aurora' } }] },
  { content: 'ok', reasoning_details: ['aurora'] },
  { content: 'ok', reasoning_details: [{ type: 'reasoning.text', text: 'ok', data: 'aurora' }] },
  { content: 'ok', thinking_blocks: { type: 'thinking', thinking: 'aurora', signature: 'sig' } },
  { content: 'ok', thinking_blocks: [{ type: 'thinking', thinking: 'ok', signature: 'sig', note: 'aurora' }] },
  { content: 'ok', thinking_blocks: 'aurora' },
  { content: [{ type: 'text', text: 'ok', note: 'aurora' }] },
  { content: [{ type: 'text', text: 'ok', extra: { deep: ['aurora'] } }] },
  { content: [{ type: 'refusal', refusal: 'no', reason: 'aurora' }] },
  { content: [{ type: 'image_url', image_url: { url: 'https://example.com/a.png' }, caption: 'aurora' }] },
  { content: [{ type: 'image_url', image_url: { url: 'https://example.com/a.png', alt: 'aurora' } }] },
  { content: 'ok', audio: { id: 'audio_1', transcript: { text: 'aurora' } } },
  { content: 'ok', audio: { id: 'audio_1', transcript: ['aurora'] } },
  { content: 'ok', audio: { id: 'audio_1', note: 'aurora' } },
  { content: 'ok', annotations: { type: 'url_citation', url_citation: { title: 'aurora', url: 'https://example.com/', start_index: 0, end_index: 2 } } },
];

/** What a request's assistant message sent back carries that the node did not read before, even as OpenAI shapes it. */
const REQUEST_ONLY: Array<Record<string, unknown>> = [
  { content: 'ok', audio: { id: 'audio_1', transcript: 'aurora' } },
  { content: 'ok', annotations: [{ type: 'url_citation', url_citation: { title: 'aurora', url: 'https://example.com/', start_index: 0, end_index: 2 } }] },
];

/** An assistant message in the shapes servers send, every opaque field holding `aurora`: none of it is checked. */
const ORDINARY: Record<string, unknown> = {
  role: 'assistant',
  content: [
    { type: 'text', text: 'ok', cache_control: { type: 'ephemeral' } },
    { type: 'image_url', image_url: { url: URL, detail: 'auto' } },
    { type: 'thinking', thinking: 'hm', signature: 'sig-aurora==' },
  ],
  reasoning: 'thinking it over',
  reasoning_details: [
    { type: 'reasoning.text', text: 'thinking it over', signature: 'sig-aurora==', format: 'anthropic-claude-v1', index: 0 },
    { type: 'reasoning.encrypted', data: 'enc-aurora==', id: 'rs_aurora', format: 'openai-responses-v1', index: 1 },
  ],
  thinking_blocks: [
    { type: 'thinking', thinking: 'thinking it over', signature: 'sig-aurora==' },
    { type: 'redacted_thinking', data: 'enc-aurora==' },
  ],
  audio: { id: 'audio_aurora' },
  annotations: [{ type: 'url_citation', url_citation: { title: 'Weather', url: 'https://example.com/', start_index: 0, end_index: 2 } }],
};

const OK = chatAnswerWith({ content: 'ok' });
/** An assistant message sent back with `fields`. */
const assistantWith = (fields: Record<string, unknown>): Record<string, unknown> => ({ role: 'assistant', ...fields });

t.test("a request's reasoning_details or thinking_blocks as one object or with items carrying other keys, known content parts with extra keys, an audio's transcript (a string or not) and other keys, and annotations (a list or one object) are checked by input rules: a blocked keyword refuses the request before the upstream is called, e-mail addresses are masked; URLs, signatures, encrypted data, ids, tags and cache_control stay unchecked, and without input rules everything is forwarded as it came", async (t) => {
  const guarded = await startGuardedNode(t, rules('input'));
  const { upstream, node } = guarded;
  upstream.answer = OK;

  await checkOddRequestsRefusedBeforeTheUpstream(t, guarded, [...ODD_MESSAGES, ...REQUEST_ONLY], assistantWith);

  const masked = {
    role: 'assistant',
    content: [{ type: 'text', text: 'ok', note: 'to eve@example.org' }, { type: 'image_url', image_url: { url: 'https://example.com/a.png', alt: 'eve@example.org' } }],
    reasoning_details: { type: 'reasoning.summary', summary: 'for eve@example.org', signature: 'sig' },
    thinking_blocks: [{ type: 'thinking', thinking: 'hm', signature: 'sig', note: 'eve@example.org' }],
    audio: { id: 'audio_1', transcript: ['to eve@example.org'] },
    annotations: { type: 'url_citation', url_citation: { title: 'eve@example.org', url: 'https://example.com/' } },
  };
  t.equal((await postChat(node, node.secret, { messages: [...USER_GO, masked] })).status, 200);
  t.same(
    forwardedMessages(upstream)[1],
    {
      role: 'assistant',
      content: [{ type: 'text', text: 'ok', note: 'to [EMAIL]' }, { type: 'image_url', image_url: { url: 'https://example.com/a.png', alt: '[EMAIL]' } }],
      reasoning_details: { type: 'reasoning.summary', summary: 'for [EMAIL]', signature: 'sig' },
      thinking_blocks: [{ type: 'thinking', thinking: 'hm', signature: 'sig', note: '[EMAIL]' }],
      audio: { id: 'audio_1', transcript: ['to EMAIL'] },
      annotations: { type: 'url_citation', url_citation: { title: '[EMAIL]', url: 'https://example.com/' } },
    },
    'extra keys masked in place, an odd transcript without brackets',
  );

  const ordinary = [...USER_GO, ORDINARY, { role: 'user', content: [{ type: 'text', text: 'and this?' }, { type: 'image_url', image_url: { url: URL } }] }];
  t.equal((await postChat(node, node.secret, { messages: ordinary })).status, 200, 'no URL, signature, encrypted data, id, tag or cache_control was checked');
  t.same(forwardedMessages(upstream), ordinary, 'forwarded as they came');

  await checkOddRequestsForwardedWithoutRules(t, guarded, [...ODD_MESSAGES, ...REQUEST_ONLY], assistantWith);
});

t.test("a JSON answer's reasoning_details or thinking_blocks as one object or with items carrying other keys, known content parts with extra keys, a non-string audio transcript or other audio keys, and annotations as one object are checked by output rules: a blocked keyword blocks the answer, e-mail addresses are masked; an ordinary answer goes out as it came, and without output rules everything passes", async (t) => {
  const guarded = await startGuardedNode(t, rules('output'));
  const { upstream, node } = guarded;

  await checkOddAnswersBlockedUnderOutputRules(t, guarded, ODD_MESSAGES);

  upstream.answer = chatAnswerWith({
    content: [{ type: 'text', text: 'ok', note: 'to eve@example.org' }],
    thinking_blocks: { type: 'thinking', thinking: 'for eve@example.org', signature: 'sig' },
    audio: { id: 'audio_1', transcript: { text: 'to eve@example.org' } },
    annotations: { type: 'url_citation', url_citation: { title: 'eve@example.org', url: 'https://example.com/' } },
  });
  const masked = await postChat(node, node.secret, { messages: USER_GO });
  t.equal(masked.status, 200);
  t.notMatch(masked.text, /eve@/);
  t.same(answerMessage(masked.text), {
    role: 'assistant',
    content: [{ type: 'text', text: 'ok', note: 'to [EMAIL]' }],
    thinking_blocks: { type: 'thinking', thinking: 'for [EMAIL]', signature: 'sig' },
    audio: { id: 'audio_1', transcript: { text: 'to EMAIL' } },
    annotations: { type: 'url_citation', url_citation: { title: '[EMAIL]', url: 'https://example.com/' } },
  });

  upstream.answer = chatAnswerWith(ORDINARY);
  const res = await postChat(node, node.secret, { messages: USER_GO });
  t.equal(res.status, 200, 'no URL, signature, encrypted data, id, tag or cache_control was checked');
  t.same(answerMessage(res.text), ORDINARY, 'as it came');
});

t.test('a streamed delta with reasoning_details or thinking_blocks as one object, a non-object item or items carrying other keys, or a known content part with extra keys ends the stream under output rules, none of it sent; annotations as one object are checked whole in their chunk; an ordinary stream with signatures and encrypted data goes on, and without output rules they pass byte for byte', async (t) => {
  const guarded = await startGuardedNode(t, rules('output'));
  const { upstream, node } = guarded;
  const ask = { model: 'echo', messages: USER_GO };

  for (const delta of [
    { reasoning_details: { type: 'reasoning.text', text: 'aurora' } },
    { reasoning_details: [{ type: 'reasoning.text', text: 'ok', note: 'aurora', index: 0 }] },
    { reasoning_details: [{ type: 'reasoning.text', text: { x: 'aurora' }, index: 0 }] },
    { reasoning_details: ['aurora'] },
    { thinking_blocks: { type: 'thinking', thinking: 'aurora' } },
    { thinking_blocks: [{ type: 'thinking', thinking: 'ok', note: 'aurora' }] },
    { content: [{ type: 'text', text: 'ok', note: 'aurora' }] },
    { content: [{ type: 'image_url', image_url: { url: 'https://example.com/a.png', alt: 'aurora' } }] },
    { annotations: { type: 'url_citation', url_citation: { title: 'aurora', url: 'https://example.com/' } } },
  ]) {
    await checkStreamedDeltaEndsTheStream(t, guarded, ask, delta, { finish: 'stop', label: JSON.stringify(delta), hidden: /aurora/, hiddenWhat: 'nothing of it was sent' });
  }

  upstream.answer = { sse: [chatChunkEvent({ role: 'assistant', content: 'See.' }), chatChunkEvent({ annotations: { type: 'url_citation', url_citation: { title: 'mail eve@example.org', url: 'https://example.com/' } } }), chatChunkEvent({}, 'stop'), SSE_DONE] };
  const annotated = await rawChatStream(node, node.secret, ask);
  t.notMatch(annotated.body, /eve@/, 'the annotation object was masked in its chunk');
  t.match(annotated.body, /"title":"mail \[EMAIL\]"/);
  t.match(annotated.body, /data: \[DONE\]\n\n$/);

  upstream.answer = {
    sse: [
      chatChunkEvent({ role: 'assistant', content: '', reasoning: 'thinking it over', reasoning_details: [{ type: 'reasoning.text', text: 'thinking it over', signature: 'sig-aurora==', format: 'anthropic-claude-v1', index: 0 }] }),
      chatChunkEvent({ reasoning_details: [{ type: 'reasoning.encrypted', data: 'enc-aurora==', id: 'rs_aurora', index: 1 }] }),
      chatChunkEvent({ reasoning_content: 'hm', thinking_blocks: [{ type: 'thinking', thinking: 'hm', signature: 'sig-aurora==' }] }),
      chatChunkEvent({ content: [{ type: 'text', text: 'Done.' }, { type: 'thinking', thinking: 'ok', signature: 'sig-aurora==' }] }),
      chatChunkEvent({}, 'stop'),
      SSE_DONE,
    ],
  };
  const { body } = await rawChatStream(node, node.secret, ask);
  t.notMatch(body, /ZN_ERR_GUARDRAIL/, 'no signature, encrypted data, id or tag was checked');
  t.match(body, /"data":"enc-aurora=="/);
  t.match(body, /data: \[DONE\]\n\n$/);
});

t.test('a flag rule counts a match once in an extra key of a content part, a reasoning_details or thinking_blocks object or item key, a non-string audio transcript and an annotations object, in a JSON answer and in a request', async (t) => {
  const { spool, matches } = recordedGuardrailMatches();
  const guarded = await startGuardedNode(t, [{ detector: 'email', action: 'flag', on: 'both' }], { spool });

  const messages: Array<Record<string, unknown>> = [
    { content: [{ type: 'text', text: 'ok', note: 'to eve@example.org' }] },
    { content: 'ok', reasoning_details: { type: 'reasoning.text', text: 'to eve@example.org' } },
    { content: 'ok', reasoning_details: [{ type: 'reasoning.text', text: 'ok', note: 'to eve@example.org' }] },
    { content: 'ok', thinking_blocks: { type: 'thinking', thinking: 'to eve@example.org' } },
    { content: 'ok', audio: { id: 'audio_1', transcript: ['to eve@example.org'] } },
    { content: 'ok', annotations: { type: 'url_citation', url_citation: { title: 'to eve@example.org' } } },
  ];
  await checkFlagCountsOnceInAnswersAndRequests(t, guarded, matches, messages, assistantWith);
});
