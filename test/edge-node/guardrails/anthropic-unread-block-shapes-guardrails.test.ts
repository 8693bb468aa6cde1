// On /v1/messages, text in shapes the node used to pass on unread: a text block's `citations` as one
// object (or an entry that is not an object), an answer's `content` that is a string or one block,
// a content entry that is not an object, a block without a type, strings beside the payload of a
// block carrying no text (`image`, `redacted_thinking`, `container_upload`), a document's citation
// setting or source with strings beside its payload (or a source of another shape), and in streams
// a `citations_delta` whose citation is not an object and an event whose block, delta or message is
// not an object. Checked like the rest in requests, JSON
// answers and whole stream events (masked in place or blocking); a stream event that cannot be
// placed ends the stream under output rules. Image data and URLs, signatures and redacted data stay
// unchecked, and without rules everything goes on as it came.
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { startGuardedNode } from './guarded-node.js';

const rules = (on: GuardrailRule['on']): GuardrailRule[] => [
  { detector: 'email', action: 'mask', on },
  { detector: 'keywords', keywords: ['aurora'], action: 'block', on },
];

function event(type: string, body: Record<string, unknown>): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`;
}
const START = event('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } });
const END = [event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 20 } }), event('message_stop', {})];
const TEXT_START = event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
const STOP = event('content_block_stop', { index: 0 });
const delta = (body: Record<string, unknown>): string => event('content_block_delta', { index: 0, delta: body });

async function messages(node: { origin: string }, secret: string, body: Record<string, unknown>): Promise<{ status: number; text: string }> {
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': secret },
    body: JSON.stringify({ model: 'claude', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }], ...body }),
  });
  return { status: res.status, text: await res.text() };
}

const IMAGE_SOURCE = { type: 'base64', media_type: 'image/png', data: 'iVBORaurora==' };

/** Blocks whose only `aurora` sits where the node did not read, in a request's or an answer's content. */
const ODD_BLOCKS: Array<Record<string, unknown>> = [
  { type: 'text', text: 'ok', citations: { type: 'char_location', cited_text: 'aurora', document_index: 0, start_char_index: 0, end_char_index: 6 } },
  { type: 'text', text: 'ok', citations: ['aurora'] },
  { type: 'image', source: IMAGE_SOURCE, title: 'aurora' },
  { type: 'image', source: { ...IMAGE_SOURCE, note: 'aurora' } },
  { type: 'redacted_thinking', data: 'EqQBopaque', note: 'aurora' },
  { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'ok' }, citations: { enabled: true, note: 'aurora' } },
  { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'ok', note: 'aurora' } },
  { type: 'document', source: { type: 'content', content: [{ type: 'text', text: 'ok' }], note: 'aurora' } },
  { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0x', title: 'aurora' } },
  { type: 'document', source: ['aurora'] },
];

function answer(content: unknown): { json: unknown } {
  return { json: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude', content, stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 5, output_tokens: 7 } } };
}

t.test("a request's text block with citations as one object or with an entry that is not an object, an image or redacted_thinking block with strings beside its payload, and a document's citation setting or source with strings beside its payload, or a source that is a list, are checked by input rules: a blocked keyword refuses the request before the upstream is called, an e-mail is masked; image data, redacted data and signatures stay unchecked, and without input rules everything is forwarded as it came", async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, rules('input'));
  upstream.answer = answer([{ type: 'text', text: 'ok' }]);
  const ask = (block: Record<string, unknown>): Record<string, unknown> => ({ messages: [{ role: 'user', content: [block, { type: 'text', text: 'go' }] }] });

  for (const block of ODD_BLOCKS) {
    const sent = upstream.requests.length;
    const res = await messages(node, node.secret, ask(block));
    t.equal(res.status, 400, JSON.stringify(block));
    t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.equal(upstream.requests.length, sent, 'the upstream was never called');

    t.equal((await messages(node, plainSecret, ask(block))).status, 200, 'without input rules');
    t.same((upstream.requests.at(-1)!.body as { messages: Array<{ content: unknown[] }> }).messages[0]!.content[0], block, 'forwarded as it came');
  }

  t.equal((await messages(node, node.secret, ask({ type: 'image', source: IMAGE_SOURCE, title: 'from eve@example.org' }))).status, 200);
  t.same((upstream.requests.at(-1)!.body as { messages: Array<{ content: unknown[] }> }).messages[0]!.content[0], { type: 'image', source: IMAGE_SOURCE, title: 'from [EMAIL]' });

  const ordinary = { messages: [{ role: 'user', content: [{ type: 'image', source: IMAGE_SOURCE, cache_control: { type: 'ephemeral' } }, { type: 'text', text: 'go' }] }, { role: 'assistant', content: [{ type: 'redacted_thinking', data: 'EqQBaurora' }, { type: 'text', text: 'ok' }] }, { role: 'user', content: 'more' }] };
  t.equal((await messages(node, node.secret, ordinary)).status, 200, 'image data and redacted data unchecked');
});

t.test("a JSON answer's text block with citations as one object, content that is a string, one block or holds a non-object entry, a block without a type, and an image block with strings beside its source are checked by output rules: a blocked keyword blocks the answer, an e-mail is masked; without output rules it passes", async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, rules('output'));
  const contents: unknown[] = [
    [ODD_BLOCKS[0]],
    [ODD_BLOCKS[1]],
    [ODD_BLOCKS[2]],
    [ODD_BLOCKS[4]],
    'aurora',
    { type: 'text', text: 'aurora' },
    ['aurora'],
    [{ text: 'aurora' }],
    [{ type: { name: 'aurora' }, text: 'ok' }],
  ];
  for (const content of contents) {
    upstream.answer = answer(content);
    const res = await messages(node, node.secret, {});
    t.equal(res.status, 400, JSON.stringify(content));
    t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(res.text, /aurora/);

    upstream.answer = answer(content);
    const plain = await messages(node, plainSecret, {});
    t.equal(plain.status, 200, 'without output rules it passes');
    t.same((JSON.parse(plain.text) as { content: unknown }).content, content);
  }

  upstream.answer = answer([{ type: 'text', text: 'ok', citations: { type: 'char_location', cited_text: 'mail eve@example.org', document_index: 0 } }, { text: 'to eve@example.org' }]);
  const masked = await messages(node, node.secret, {});
  t.equal(masked.status, 200);
  t.same((JSON.parse(masked.text) as { content: unknown }).content, [{ type: 'text', text: 'ok', citations: { type: 'char_location', cited_text: 'mail [EMAIL]', document_index: 0 } }, { text: 'to [EMAIL]' }]);
});

t.test('a stream whose citations_delta carries a citation that is not an object, whose text block starts with citations as one object, or whose block, delta or message is not an object is checked under output rules: blocked or masked whole in its event, none of the blocked text sent; without output rules it passes as it came', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, rules('output'));
  const streams: Record<string, string[]> = {
    'a citations_delta whose citation is a list': [START, TEXT_START, delta({ type: 'text_delta', text: 'ok' }), delta({ type: 'citations_delta', citation: ['aurora'] }), STOP, ...END],
    'a citations_delta whose citation is a string': [START, TEXT_START, delta({ type: 'citations_delta', citation: 'aurora' }), STOP, ...END],
    'a text block starting with citations as one object': [START, event('content_block_start', { index: 0, content_block: { type: 'text', text: '', citations: { cited_text: 'aurora' } } }), delta({ type: 'text_delta', text: 'ok' }), STOP, ...END],
    'a content_block_start whose block is a string': [START, event('content_block_start', { index: 0, content_block: 'aurora' }), STOP, ...END],
    'a content_block_delta whose delta is a list': [START, TEXT_START, event('content_block_delta', { index: 0, delta: ['aurora'] }), STOP, ...END],
    'a message_start whose content is a string': [event('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude', content: 'aurora', usage: { input_tokens: 5, output_tokens: 1 } } }), ...END],
    'a message_start whose message is a string': [event('message_start', { message: 'aurora' }), ...END],
  };
  for (const [what, sse] of Object.entries(streams)) {
    upstream.answer = { sse };
    const res = await messages(node, node.secret, { stream: true });
    t.notMatch(res.text, /aurora/, `${what}: none of it went out`);
    t.match(res.text, /event: error\ndata: .*ZN_ERR_GUARDRAIL_BLOCKED/, `${what}: blocked`);

    upstream.answer = { sse };
    const plain = await messages(node, plainSecret, { stream: true });
    t.match(plain.text, /aurora/, `${what}: without output rules it passes`);
  }

  upstream.answer = { sse: [START, TEXT_START, delta({ type: 'text_delta', text: 'ok' }), delta({ type: 'citations_delta', citation: ['mail eve@example.org'] }), STOP, ...END] };
  const masked = await messages(node, node.secret, { stream: true });
  t.notMatch(masked.text, /eve@/);
  t.match(masked.text, /"citation":\["mail \[EMAIL\]"\]/, 'masked whole in its event');
  t.match(masked.text, /event: message_stop/);
});
