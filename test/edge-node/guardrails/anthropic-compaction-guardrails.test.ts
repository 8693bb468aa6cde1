// Guardrails over Anthropic `compaction` blocks (a model-written summary the client sends back
// later) and the `instructions` a compaction edit gives the model (`context_management.edits[]`), and over blocks and deltas of types the node does not know: the summary is checked in a
// request, a JSON answer and a stream (its `compaction_delta` whole, as SDKs assign it), its
// encrypted_content and signature left as they came; an unknown block's strings are checked, an
// unknown delta carrying strings blocks the stream under output rules.
import t from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import { startGuardedNode } from './guarded-node.js';

const EMAIL = 'alice.secret@example.com';
const SUMMARY = `Summary: the user (${EMAIL}) works on project aurora.`;
const ev = (type: string, data: Record<string, unknown>): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
const message = (content: unknown[]): Record<string, unknown> => ({
  id: 'm', type: 'message', role: 'assistant', model: 'claude-real', content, stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 3, output_tokens: 5 },
});
/** A stream of one block: its start, the given deltas, its stop. */
const blockStream = (block: Record<string, unknown>, deltas: Array<Record<string, unknown>>): string[] => [
  ev('message_start', { message: { ...message([]), stop_reason: null, usage: { input_tokens: 3, output_tokens: 1 } } }),
  ev('content_block_start', { index: 0, content_block: block }),
  ...deltas.map((delta) => ev('content_block_delta', { index: 0, delta })),
  ev('content_block_stop', { index: 0 }),
  ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 20 } }),
  ev('message_stop', {}),
];
const compactionStream = (): string[] =>
  blockStream({ type: 'compaction', content: null, encrypted_content: null }, [{ type: 'compaction_delta', content: SUMMARY, encrypted_content: 'opaque-state' }]);

async function post(node: { origin: string }, secret: string, body: Record<string, unknown>): Promise<{ status: number; text: string }> {
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': secret, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude', max_tokens: 100, ...body }),
  });
  return { status: res.status, text: await res.text() };
}

t.test('an input mask rule masks the summary of a compaction block the client sends back, not its encrypted content or signature', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'input' }]);
  upstream.answer = { json: message([{ type: 'text', text: 'ok' }]) };
  const compaction = { type: 'compaction', content: SUMMARY, encrypted_content: `enc-${EMAIL}`, signature: `sig-${EMAIL}` };
  const { status } = await post(node, node.secret, { messages: [{ role: 'assistant', content: [compaction] }, { role: 'user', content: 'go on' }] });
  t.equal(status, 200);
  const sent = upstream.requests.at(-1)!.body as { messages: Array<{ content: unknown }> };
  t.same(sent.messages[0]!.content, [{ ...compaction, content: 'Summary: the user ([EMAIL]) works on project aurora.' }]);
});

t.test('an input block rule refuses a request whose compaction summary holds a match, forwarding nothing', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'input' }]);
  const before = upstream.requests.length;
  const { status, text } = await post(node, node.secret, { messages: [{ role: 'assistant', content: [{ type: 'compaction', content: SUMMARY, encrypted_content: null }] }, { role: 'user', content: 'go on' }] });
  t.equal(status, 400);
  t.match(text, /ZN_ERR_GUARDRAIL_BLOCKED/);
  t.equal(upstream.requests.length, before);
});

t.test("input rules check a compaction edit's instructions: a mask rewrites them upstream, a block refuses the request", async (t) => {
  const { upstream, node } = await startGuardedNode(t, [
    { detector: 'email', action: 'mask', on: 'input' },
    { detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'input' },
  ]);
  upstream.answer = { json: message([{ type: 'text', text: 'ok' }]) };
  const compact = (instructions: string): Record<string, unknown> => ({ edits: [{ type: 'compact_20260112', trigger: { type: 'input_tokens', value: 150000 }, instructions }] });
  const masked = await post(node, node.secret, { context_management: compact(`Keep ${EMAIL} in the summary.`), messages: [{ role: 'user', content: 'hi' }] });
  t.equal(masked.status, 200);
  const sent = upstream.requests.at(-1)!.body as { context_management: unknown };
  t.same(sent.context_management, compact('Keep [EMAIL] in the summary.'));
  const before = upstream.requests.length;
  const blocked = await post(node, node.secret, { context_management: compact('Always mention project aurora.'), messages: [{ role: 'user', content: 'hi' }] });
  t.equal(blocked.status, 400);
  t.match(blocked.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
  t.equal(upstream.requests.length, before, 'nothing forwarded');
});

t.test('an output mask rule masks the summary of a compaction block in a JSON answer', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  upstream.answer = { json: message([{ type: 'compaction', content: SUMMARY, encrypted_content: 'opaque-state' }, { type: 'text', text: 'ok' }]) };
  const { status, text } = await post(node, node.secret, { messages: [{ role: 'user', content: 'hi' }] });
  t.equal(status, 200);
  t.same((JSON.parse(text) as { content: unknown[] }).content, [{ type: 'compaction', content: 'Summary: the user ([EMAIL]) works on project aurora.', encrypted_content: 'opaque-state' }, { type: 'text', text: 'ok' }]);
});

t.test('an output mask rule masks a streamed compaction_delta whole, so the SDK final message holds the masked summary', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  upstream.answer = { sse: compactionStream() };
  const anthropic = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0 });
  const final = await anthropic.beta.messages.stream({ model: 'claude', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
  t.same(final.content, [{ type: 'compaction', content: 'Summary: the user ([EMAIL]) works on project aurora.', encrypted_content: 'opaque-state' }]);
});

t.test('an output block rule ends a stream whose compaction_delta holds a match, sending none of it', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'output' }]);
  upstream.answer = { sse: compactionStream() };
  const { status, text } = await post(node, node.secret, { stream: true, messages: [{ role: 'user', content: 'hi' }] });
  t.equal(status, 200);
  t.notOk(text.includes('aurora'));
  t.notOk(text.includes('compaction_delta'), 'the blocked event is not sent');
  t.match(text, /event: error\ndata: .*ZN_ERR_GUARDRAIL_BLOCKED/);
});

t.test('input and output mask rules mask every string of a block of a type the node does not know, but its type, id and signature', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'both' }]);
  const future = (text: string): Record<string, unknown> => ({ type: 'future_note', id: `id-${EMAIL}`, signature: `sig-${EMAIL}`, note: { body: text, tags: [text] } });
  upstream.answer = { json: message([future(`note ${EMAIL}`)]) };
  const { status, text } = await post(node, node.secret, { messages: [{ role: 'user', content: [future(`note ${EMAIL}`), { type: 'text', text: 'hi' }] }] });
  t.equal(status, 200);
  const sent = upstream.requests.at(-1)!.body as { messages: Array<{ content: unknown[] }> };
  t.same(sent.messages[0]!.content[0], future('note [EMAIL]'), 'masked in the forwarded request');
  t.same((JSON.parse(text) as { content: unknown[] }).content, [future('note [EMAIL]')], 'masked in the JSON answer');
});

t.test('an output mask rule masks the strings a content_block_start of an unknown type carries', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  upstream.answer = { sse: blockStream({ type: 'future_note', note: `note ${EMAIL}` }, []) };
  const { status, text } = await post(node, node.secret, { stream: true, messages: [{ role: 'user', content: 'hi' }] });
  t.equal(status, 200);
  t.notOk(text.includes(EMAIL));
  t.match(text, /"note":"note \[EMAIL\]"/);
  t.match(text, /event: message_stop/);
});

t.test('under output rules a delta of an unknown type carrying strings ends the stream; without them it passes as it came', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  const futureDelta = { type: 'future_delta', piece: `note ${EMAIL}` };
  upstream.answer = { sse: blockStream({ type: 'future_note' }, [futureDelta]) };
  const guarded = await post(node, node.secret, { stream: true, messages: [{ role: 'user', content: 'hi' }] });
  t.equal(guarded.status, 200);
  t.notOk(guarded.text.includes(EMAIL));
  t.match(guarded.text, /event: error\ndata: .*ZN_ERR_GUARDRAIL_BLOCKED/);
  const plain = await post(node, plainSecret, { stream: true, messages: [{ role: 'user', content: 'hi' }] });
  t.equal(plain.status, 200);
  t.ok(plain.text.includes(JSON.stringify(futureDelta)), 'a key without rules gets the delta untouched');
  t.match(plain.text, /event: message_stop/);
});

t.test('under output rules a thinking block signature_delta still goes out: it carries no text', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  upstream.answer = { sse: blockStream({ type: 'thinking', thinking: '', signature: '' }, [{ type: 'thinking_delta', thinking: 'let me see' }, { type: 'signature_delta', signature: 'c2lnbmF0dXJl' }]) };
  const anthropic = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0 });
  const final = await anthropic.messages.stream({ model: 'claude', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
  t.same(final.content, [{ type: 'thinking', thinking: 'let me see', signature: 'c2lnbmF0dXJl' }]);
});
