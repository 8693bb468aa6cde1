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
import type { GuardrailRule, RequestRecord } from '../../../proto/src/index.js';
import { rawChatStream, startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';

const USER = [{ role: 'user' as const, content: 'go' }];
const DONE = 'data: [DONE]\n\n';
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
    body: JSON.stringify({ model: 'echo', ...body }),
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

t.test("a request's reasoning_details or thinking_blocks as one object or with items carrying other keys, known content parts with extra keys, an audio's transcript (a string or not) and other keys, and annotations (a list or one object) are checked by input rules: a blocked keyword refuses the request before the upstream is called, e-mail addresses are masked; URLs, signatures, encrypted data, ids, tags and cache_control stay unchecked, and without input rules everything is forwarded as it came", async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, rules('input'));
  upstream.answer = OK;

  for (const fields of [...ODD_MESSAGES, ...REQUEST_ONLY]) {
    const sent = upstream.requests.length;
    const res = await post(node, node.secret, { messages: [...USER, { role: 'assistant', ...fields }] });
    t.equal(res.status, 400, JSON.stringify(fields));
    t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(res.text, /aurora/);
    t.equal(upstream.requests.length, sent, 'the upstream was never called');
  }

  const masked = {
    role: 'assistant',
    content: [{ type: 'text', text: 'ok', note: 'to eve@example.org' }, { type: 'image_url', image_url: { url: 'https://example.com/a.png', alt: 'eve@example.org' } }],
    reasoning_details: { type: 'reasoning.summary', summary: 'for eve@example.org', signature: 'sig' },
    thinking_blocks: [{ type: 'thinking', thinking: 'hm', signature: 'sig', note: 'eve@example.org' }],
    audio: { id: 'audio_1', transcript: ['to eve@example.org'] },
    annotations: { type: 'url_citation', url_citation: { title: 'eve@example.org', url: 'https://example.com/' } },
  };
  t.equal((await post(node, node.secret, { messages: [...USER, masked] })).status, 200);
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

  const ordinary = [...USER, ORDINARY, { role: 'user', content: [{ type: 'text', text: 'and this?' }, { type: 'image_url', image_url: { url: URL } }] }];
  t.equal((await post(node, node.secret, { messages: ordinary })).status, 200, 'no URL, signature, encrypted data, id, tag or cache_control was checked');
  t.same(forwardedMessages(upstream), ordinary, 'forwarded as they came');

  for (const fields of [...ODD_MESSAGES, ...REQUEST_ONLY]) {
    const odd = [...USER, { role: 'assistant', ...fields }];
    t.equal((await post(node, plainSecret, { messages: odd })).status, 200, 'the schema takes the shape');
    t.same(forwardedMessages(upstream), odd, 'without input rules it is forwarded as it came');
  }
});

t.test("a JSON answer's reasoning_details or thinking_blocks as one object or with items carrying other keys, known content parts with extra keys, a non-string audio transcript or other audio keys, and annotations as one object are checked by output rules: a blocked keyword blocks the answer, e-mail addresses are masked; an ordinary answer goes out as it came, and without output rules everything passes", async (t) => {
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
    content: [{ type: 'text', text: 'ok', note: 'to eve@example.org' }],
    thinking_blocks: { type: 'thinking', thinking: 'for eve@example.org', signature: 'sig' },
    audio: { id: 'audio_1', transcript: { text: 'to eve@example.org' } },
    annotations: { type: 'url_citation', url_citation: { title: 'eve@example.org', url: 'https://example.com/' } },
  });
  const masked = await post(node, node.secret, { messages: USER });
  t.equal(masked.status, 200);
  t.notMatch(masked.text, /eve@/);
  t.same(answerMessage(masked.text), {
    role: 'assistant',
    content: [{ type: 'text', text: 'ok', note: 'to [EMAIL]' }],
    thinking_blocks: { type: 'thinking', thinking: 'for [EMAIL]', signature: 'sig' },
    audio: { id: 'audio_1', transcript: { text: 'to EMAIL' } },
    annotations: { type: 'url_citation', url_citation: { title: '[EMAIL]', url: 'https://example.com/' } },
  });

  upstream.answer = answerWith(ORDINARY);
  const res = await post(node, node.secret, { messages: USER });
  t.equal(res.status, 200, 'no URL, signature, encrypted data, id, tag or cache_control was checked');
  t.same(answerMessage(res.text), ORDINARY, 'as it came');
});

t.test('a streamed delta with reasoning_details or thinking_blocks as one object, a non-object item or items carrying other keys, or a known content part with extra keys ends the stream under output rules, none of it sent; annotations as one object are checked whole in their chunk; an ordinary stream with signatures and encrypted data goes on, and without output rules they pass byte for byte', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, rules('output'));
  const ask = { model: 'echo', messages: USER };

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
    const sse = [chunk({ role: 'assistant', content: 'Looking.' }), chunk(delta), chunk({}, 'stop'), DONE];
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

  upstream.answer = { sse: [chunk({ role: 'assistant', content: 'See.' }), chunk({ annotations: { type: 'url_citation', url_citation: { title: 'mail eve@example.org', url: 'https://example.com/' } } }), chunk({}, 'stop'), DONE] };
  const annotated = await rawChatStream(node, node.secret, ask);
  t.notMatch(annotated.body, /eve@/, 'the annotation object was masked in its chunk');
  t.match(annotated.body, /"title":"mail \[EMAIL\]"/);
  t.match(annotated.body, /data: \[DONE\]\n\n$/);

  upstream.answer = {
    sse: [
      chunk({ role: 'assistant', content: '', reasoning: 'thinking it over', reasoning_details: [{ type: 'reasoning.text', text: 'thinking it over', signature: 'sig-aurora==', format: 'anthropic-claude-v1', index: 0 }] }),
      chunk({ reasoning_details: [{ type: 'reasoning.encrypted', data: 'enc-aurora==', id: 'rs_aurora', index: 1 }] }),
      chunk({ reasoning_content: 'hm', thinking_blocks: [{ type: 'thinking', thinking: 'hm', signature: 'sig-aurora==' }] }),
      chunk({ content: [{ type: 'text', text: 'Done.' }, { type: 'thinking', thinking: 'ok', signature: 'sig-aurora==' }] }),
      chunk({}, 'stop'),
      DONE,
    ],
  };
  const { body } = await rawChatStream(node, node.secret, ask);
  t.notMatch(body, /ZN_ERR_GUARDRAIL/, 'no signature, encrypted data, id or tag was checked');
  t.match(body, /"data":"enc-aurora=="/);
  t.match(body, /data: \[DONE\]\n\n$/);
});

t.test('a flag rule counts a match once in an extra key of a content part, a reasoning_details or thinking_blocks object or item key, a non-string audio transcript and an annotations object, in a JSON answer and in a request', async (t) => {
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
    { content: [{ type: 'text', text: 'ok', note: 'to eve@example.org' }] },
    { content: 'ok', reasoning_details: { type: 'reasoning.text', text: 'to eve@example.org' } },
    { content: 'ok', reasoning_details: [{ type: 'reasoning.text', text: 'ok', note: 'to eve@example.org' }] },
    { content: 'ok', thinking_blocks: { type: 'thinking', thinking: 'to eve@example.org' } },
    { content: 'ok', audio: { id: 'audio_1', transcript: ['to eve@example.org'] } },
    { content: 'ok', annotations: { type: 'url_citation', url_citation: { title: 'to eve@example.org' } } },
  ];
  for (const message of messages) {
    upstream.answer = answerWith(message);
    const res = await post(node, node.secret, { messages: USER });
    t.equal(res.status, 200);
    t.equal(await matches(res.requestId, 'output'), 1, `answer: ${JSON.stringify(message)}`);
  }
  upstream.answer = OK;
  for (const message of messages) {
    const res = await post(node, node.secret, { messages: [...USER, { role: 'assistant', ...message }] });
    t.equal(res.status, 200);
    t.equal(await matches(res.requestId, 'input'), 1, `request: ${JSON.stringify(message)}`);
  }
});
