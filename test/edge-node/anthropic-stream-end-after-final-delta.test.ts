// How an Anthropic stream ends around its message_delta, through the real app and a raw upstream:
// once the final message_delta (the one with the stop_reason) came, a connection reset or a stall
// loses nothing of the answer: the node adds message_stop, records ok with the usage read, and the
// attempt is no failure against the target (as chat streams end after every finish_reason:
// docs/errors.md). A message_delta without a stop_reason carries running counts only: text after
// it is still metered when the stream breaks (docs/billing.md).
import type { Socket } from 'node:net';
import t from 'tap';
import { estimateTokens } from '../../edge-node/src/providers/token-estimate.js';
import { SSE_HEAD_CHUNKED, httpChunk, startRawUpstream } from '../fixtures/raw-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import type { PipelineNode } from './pipeline/pipeline-harness.js';
import { startPipelineNode, withClaudeRoute } from './pipeline/pipeline-harness.js';

/** An Anthropic SSE event of `type`, its data `{type, ...fields}`. */
const event = (type: string, fields: Record<string, unknown> = {}): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`;
const messageStart = event('message_start', {
  message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 10, output_tokens: 1 } },
});
const textStart = event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
const textDelta = (text: string): string => event('content_block_delta', { index: 0, delta: { type: 'text_delta', text } });
const finalDelta = event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 30 } });
const ANSWER = [messageStart, textStart, textDelta('Hello'), event('content_block_stop', { index: 0 }), finalDelta];

/** A node whose alias `claude` goes to `url`, no retries, the given timeout (also the longest gap between two events). */
function claudeNode(t: { teardown(fn: () => unknown): void }, url: string, timeoutMs = 30_000): Promise<PipelineNode> {
  return startPipelineNode(t, {
    upstreamUrl: url,
    bundle: (base) => {
      const claude = withClaudeRoute(base, url);
      return { ...claude, routes: claude.routes.map((route) => (route.alias === 'claude' ? { ...route, timeoutMs, retries: 0 } : route)) };
    },
  });
}

async function streamMessages(node: PipelineNode): Promise<{ text: string; requestId: string | null; ms: number }> {
  const started = Date.now();
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude', max_tokens: 4000, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await res.text();
  return { text, requestId: res.headers.get('request-id') ?? res.headers.get('x-request-id'), ms: Date.now() - started };
}

function finishedRequest(node: PipelineNode, requestId: string | null) {
  return waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: 'the finished request' });
}

const endings: Array<[string, (socket: Socket) => void, number]> = [
  ['a connection reset', (socket) => setTimeout(() => socket.resetAndDestroy(), 30), 30_000],
  // Nothing after message_delta: cut by the 600 ms gap between events.
  ['a stall', () => undefined, 600],
];

for (const [ending, end, timeoutMs] of endings) {
  t.test(`${ending} after the final message_delta keeps the complete answer: message_stop added, recorded ok with the usage read, and the attempt not failed`, async (t) => {
    const upstream = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CHUNKED);
      socket.write(httpChunk(ANSWER.join('')), () => end(socket));
    });
    const node = await claudeNode(t, upstream.url, timeoutMs);
    const { text, requestId } = await streamMessages(node);
    t.match(text, /"text":"Hello"/);
    t.notMatch(text, /event: error/);
    t.match(text, /"stop_reason":"end_turn"[^\n]*\n\nevent: message_stop\ndata: \{"type":"message_stop"\}\n\n$/, 'the caller gets message_stop after the final message_delta');
    const done = await finishedRequest(node, requestId);
    t.same(done.outcome, { status: 'ok', httpStatus: 200, errorCode: null });
    t.same(done.usage, { inputTokens: 10, outputTokens: 30, estimated: false });
    t.same(done.attempts.map((a) => a.outcome), ['ok'], 'nothing counted against the target');
  });
}

t.test('an upstream error event after the final message_delta still fails the stream', async (t) => {
  const upstream = await startRawUpstream(t, (socket) => {
    socket.write(SSE_HEAD_CHUNKED);
    socket.write(httpChunk([...ANSWER, event('error', { error: { type: 'overloaded_error', message: 'Overloaded' } })].join('')));
    socket.end('0\r\n\r\n');
  });
  const node = await claudeNode(t, upstream.url);
  const { text, requestId } = await streamMessages(node);
  t.match(text, /event: error\n/);
  t.notMatch(text, /message_stop/);
  const done = await finishedRequest(node, requestId);
  t.equal(done.outcome.status, 'failed');
});

t.test('text after a message_delta without a stop_reason is metered when the stream then breaks: its counts are running ones, not final', async (t) => {
  const words = 'lorem ipsum dolor sit amet consectetur adipiscing elit '.repeat(40);
  const upstream = await startRawUpstream(t, (socket) => {
    socket.write(SSE_HEAD_CHUNKED);
    socket.write(
      httpChunk([messageStart, textStart, textDelta('Hi'), event('message_delta', { delta: { stop_reason: null }, usage: { output_tokens: 2 } }), textDelta(words)].join('')),
      () => setTimeout(() => socket.resetAndDestroy(), 30),
    );
  });
  const node = await claudeNode(t, upstream.url);
  const { text, requestId } = await streamMessages(node);
  t.match(text, /lorem ipsum/, 'the text after the intermediate message_delta reached the caller');
  t.match(text, /event: error\n[^\n]*ZN_ERR_UPSTREAM_UNAVAILABLE/);
  const done = await finishedRequest(node, requestId);
  t.equal(done.outcome.status, 'failed');
  t.equal(done.usage.estimated, true, 'the running count is no final one');
  t.ok(done.usage.outputTokens >= estimateTokens(words), `${done.usage.outputTokens} output tokens for ${words.length} delivered characters`);
  t.equal(done.usage.inputTokens, 10, "message_start's input count is kept");
});

t.test('usage in a message_delta after the one with the stop_reason is final: a complete stream keeps the exact counts', async (t) => {
  const upstream = await startRawUpstream(t, (socket) => {
    socket.write(SSE_HEAD_CHUNKED);
    const stopOnly = event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null } });
    const usageOnly = event('message_delta', { delta: {}, usage: { output_tokens: 30 } });
    socket.end(httpChunk([messageStart, textStart, textDelta('Hello'), event('content_block_stop', { index: 0 }), stopOnly, usageOnly, event('message_stop')].join('')) + '0\r\n\r\n');
  });
  const node = await claudeNode(t, upstream.url);
  const { text, requestId } = await streamMessages(node);
  t.match(text, /event: message_stop\n[^\n]*\n\n$/);
  const done = await finishedRequest(node, requestId);
  t.same(done.outcome, { status: 'ok', httpStatus: 200, errorCode: null });
  t.same(done.usage, { inputTokens: 10, outputTokens: 30, estimated: false });
});

t.test('a complete stream whose message_delta names no stop_reason keeps the exact counts: message_stop makes them final', async (t) => {
  const upstream = await startRawUpstream(t, (socket) => {
    socket.write(SSE_HEAD_CHUNKED);
    const noReason = event('message_delta', { delta: { stop_reason: null }, usage: { output_tokens: 7 } });
    socket.end(httpChunk([messageStart, textStart, textDelta('Hello'), event('content_block_stop', { index: 0 }), noReason, event('message_stop')].join('')) + '0\r\n\r\n');
  });
  const node = await claudeNode(t, upstream.url);
  const { text, requestId } = await streamMessages(node);
  t.match(text, /event: message_stop\n[^\n]*\n\n$/);
  const done = await finishedRequest(node, requestId);
  t.same(done.outcome, { status: 'ok', httpStatus: 200, errorCode: null });
  t.same(done.usage, { inputTokens: 10, outputTokens: 7, estimated: false }, 'the upstream count, not an estimate');
});
