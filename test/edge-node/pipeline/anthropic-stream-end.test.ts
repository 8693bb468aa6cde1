// How a POST /v1/messages stream ends, through the real app with a raw TCP upstream: once the
// upstream sent message_stop the answer is complete (an upstream that stalls, closes or resets the
// connection after it changes nothing: the caller gets message_stop promptly and the request is
// recorded ok); a 200 event stream that ends before its first event fails the attempt so the
// fallback answers, while one that ends after it is the caller's error and is not retried; an
// upstream `event: error` ends it with the node's own error whatever its data.
import type net from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import { FAKE_ANTHROPIC_PREFIX, startFakeAnthropicUpstream } from '../../fixtures/fake-anthropic-upstream.js';
import type { FakeAnthropicUpstream } from '../../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { SSE_HEAD_CHUNKED, httpChunk, startRawUpstream } from '../../fixtures/raw-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { startPipelineNode } from './pipeline-harness.js';
import type { PipelineNode } from './pipeline-harness.js';

const ev = (type: string, data: Record<string, unknown> = {}): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
const MESSAGE_START = ev('message_start', {
  message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [], stop_reason: null, usage: { input_tokens: 10, output_tokens: 1 } },
});
/** A complete answer ("Hello there"), message_stop included. */
const FULL =
  MESSAGE_START +
  ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
  ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hello there' } }) +
  ev('content_block_stop', { index: 0 }) +
  ev('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 3 } }) +
  ev('message_stop');
const MESSAGE_STOP_LAST = /event: message_stop\ndata: \{"type":"message_stop"\}\n\n$/;

type Answer = (socket: net.Socket, request: string, n: number) => void | Promise<void>;

/**
 * A node whose alias `claude` goes to a raw upstream scripted by `answer`; with `withFallback`, it
 * falls back to a fake Anthropic upstream (`backup`).
 */
async function nodeFor(t: { teardown(fn: () => unknown): void }, answer: Answer, opts: { timeoutMs?: number; withFallback?: boolean } = {}): Promise<{ node: PipelineNode; backup: FakeAnthropicUpstream }> {
  const timeoutMs = opts.timeoutMs ?? 6_000;
  const raw = await startRawUpstream(t, answer);
  const backup = await startFakeAnthropicUpstream(t);
  const demo = await startFakeUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: demo.url,
    bundle: (base) => ({
      upstreams: [
        ...base.upstreams,
        { id: 'up-c', name: 'claude-raw', kind: 'anthropic', baseUrl: raw.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs },
        { id: 'up-c2', name: 'claude-backup', kind: 'anthropic', baseUrl: backup.url, apiKey: 'sk-ant-backup-0123456789', timeoutMs: 30_000 },
      ],
      routes: [
        ...base.routes,
        {
          alias: 'claude',
          targets: [{ upstream: 'claude-raw', model: 'claude-real', weight: 1 }],
          fallbacks: opts.withFallback === true ? [{ upstream: 'claude-backup', model: 'claude-real' }] : [],
          timeoutMs,
          retries: 0,
        },
      ],
    }),
  });
  return { node, backup };
}

function clientOf(node: PipelineNode): Anthropic {
  return new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
}

/** One streamed /v1/messages call over fetch: the status, the whole body and how long it took. */
async function streamOverFetch(node: PipelineNode) {
  const started = Date.now();
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret },
    body: JSON.stringify({ model: 'claude', max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await res.text();
  return { res, text, ms: Date.now() - started, requestId: res.headers.get('x-request-id') };
}

/** Streams through the SDK (which raises an `event: error`): the event types in order and the text. */
async function streamOverSdk(node: PipelineNode, onEvent: (type: string) => void = () => undefined) {
  const { data: stream, response } = await clientOf(node)
    .messages.create({ model: 'claude', max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'hi' }] })
    .withResponse();
  const types: string[] = [];
  let text = '';
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
    onEvent(event.type);
  }
  return { types, text, requestId: response.headers.get('x-request-id') };
}

function finishedRequest(node: PipelineNode, requestId: string | null) {
  return waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: `the finished request ${String(requestId)}` });
}

t.test('an upstream that keeps the connection open after message_stop does not hold back the caller’s message_stop for its timeout, and the request is recorded ok', async (t) => {
  const { node } = await nodeFor(t, (socket) => {
    socket.write(SSE_HEAD_CHUNKED + httpChunk(FULL)); // and then nothing, not even the last chunk
  });
  const { res, text, ms, requestId } = await streamOverFetch(node);
  t.equal(res.status, 200);
  t.match(text, MESSAGE_STOP_LAST, 'message_stop is the last event');
  t.notMatch(text, /event: error/);
  t.ok(ms < 4_000, `the answer ended after ${ms} ms, well before the 6 s timeout`);
  const done = await finishedRequest(node, requestId);
  t.same(done.outcome, { status: 'ok', httpStatus: 200, errorCode: null });
});

t.test('an upstream that resets the connection right after message_stop still gives the caller message_stop, not an error event, and the request is recorded ok with its exact usage', async (t) => {
  let deltaSeen!: () => void;
  const caughtUp = new Promise<void>((resolve) => (deltaSeen = resolve));
  const { node } = await nodeFor(t, async (socket) => {
    // One write: once the caller has message_delta, the node has read message_stop (same segment),
    // so the reset cannot discard it.
    socket.write(SSE_HEAD_CHUNKED + httpChunk(FULL));
    await caughtUp;
    socket.resetAndDestroy();
  });
  const { types, text, requestId } = await streamOverSdk(node, (type) => {
    if (type === 'message_delta') deltaSeen();
  });
  t.equal(text, 'Hello there');
  t.equal(types.at(-1), 'message_stop', 'the SDK stream ends with message_stop and raised no error');
  const done = await finishedRequest(node, requestId);
  t.same(done.outcome, { status: 'ok', httpStatus: 200, errorCode: null });
  t.match(done.usage, { inputTokens: 10, outputTokens: 3, estimated: false });
});

t.test('an upstream that sends only keep-alive comments after its first events is cut after the route timeout: an error event with ZN_ERR_UPSTREAM_TIMEOUT, recorded failed with its attempt a timeout and the partial answer metered', async (t) => {
  const { node } = await nodeFor(
    t,
    (socket) => {
      socket.write(SSE_HEAD_CHUNKED + httpChunk(MESSAGE_START + ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) + ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hello' } })));
      const keepAlive = setInterval(() => socket.write(httpChunk(': keep-alive\n\n')), 100);
      socket.on('close', () => clearInterval(keepAlive));
    },
    { timeoutMs: 600 },
  );
  const { text, ms, requestId } = await streamOverFetch(node);
  t.match(text, /"text":"Hello"/);
  t.match(text, /event: error\ndata: [^\n]*ZN_ERR_UPSTREAM_TIMEOUT[^\n]*\n\n$/);
  t.ok(ms >= 600 && ms < 5_000, `the stream ended after ${ms} ms: about the 600 ms timeout after its last event, though comments kept coming`);
  const done = await finishedRequest(node, requestId);
  t.same(done.outcome, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_UPSTREAM_TIMEOUT' });
  t.match(done.usage, { inputTokens: 10, estimated: true });
  t.ok(done.usage.outputTokens > 0, 'the output delivered is metered');
  t.same(done.attempts.map((a) => a.outcome), ['timeout']);
});

t.test('an upstream that closes the connection after message_stop without ending its chunked body still gives the caller message_stop, recorded ok', async (t) => {
  const { node } = await nodeFor(t, (socket) => {
    // A FIN follows the data in order: the node reads message_stop, then the body breaks.
    socket.end(SSE_HEAD_CHUNKED + httpChunk(FULL));
  });
  const { text, requestId } = await streamOverFetch(node);
  t.match(text, MESSAGE_STOP_LAST, 'message_stop is the last event');
  t.notMatch(text, /event: error/);
  const done = await finishedRequest(node, requestId);
  t.same(done.outcome, { status: 'ok', httpStatus: 200, errorCode: null });
});

t.test('a 200 event stream that ends before its first event falls back to the next target, but one that ends after its first event is the caller’s error and is not retried', async (t) => {
  const { node, backup } = await nodeFor(
    t,
    (socket, _request, n) => {
      // First call: an empty event stream. Second call: message_start, then a clean end.
      socket.end(SSE_HEAD_CHUNKED + (n === 1 ? '' : httpChunk(MESSAGE_START)) + '0\r\n\r\n');
    },
    { withFallback: true },
  );

  const answered = await streamOverSdk(node);
  t.equal(answered.text, `${FAKE_ANTHROPIC_PREFIX}hi`, 'the fallback answered');
  t.equal(answered.types.at(-1), 'message_stop');
  t.equal(backup.requests.length, 1, 'the fallback was tried: nothing had reached the caller');
  const first = await finishedRequest(node, answered.requestId);
  t.match(first.attempts, [{ upstream: 'claude-raw', outcome: 'error' }, { upstream: 'claude-backup', outcome: 'ok' }]);
  t.equal(first.outcome.status, 'ok');

  const { res, text, requestId } = await streamOverFetch(node);
  t.equal(res.status, 200, 'the stream had started');
  t.match(text, /^event: message_start\n/);
  t.match(text, /event: error\ndata: [^\n]*"ZN_ERR_UPSTREAM_ERROR"[^\n]*\n\n$/, 'it ends with the node’s error event');
  t.equal(backup.requests.length, 1, 'after the first event nothing is retried');
  const second = await finishedRequest(node, requestId);
  t.same(second.outcome, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
  t.equal(second.attempts.length, 1);
});

t.test('an upstream `event: error` whose data is not JSON fails the stream with the node’s own error, never the upstream’s text', async (t) => {
  const leak = 'upstream connect error: gpu-node-7.internal key sk-live-internal-123';
  const { node } = await nodeFor(t, (socket, _request, n) => {
    // First call: the error as the first event. Second call: after message_start.
    socket.end(SSE_HEAD_CHUNKED + httpChunk((n === 1 ? '' : MESSAGE_START) + `event: error\ndata: ${leak}\n\n`) + '0\r\n\r\n');
  });

  const first = await streamOverFetch(node);
  t.equal(first.res.status, 502, 'before the first event: a proper status');
  t.notMatch(first.text, /gpu-node-7|sk-live-internal|connect error/);
  t.match(first.text, /^\{"type":"error","error":\{[^\n]*ended the stream with an error\.[^\n]*"code":"ZN_ERR_UPSTREAM_ERROR"/);

  const { res, text, requestId } = await streamOverFetch(node);
  t.equal(res.status, 200, 'the stream had started');
  t.notMatch(text, /gpu-node-7|sk-live-internal|connect error/, 'the upstream’s own error text is not relayed');
  t.match(text, /event: error\ndata: [^\n]*ended the stream with an error\.[^\n]*"ZN_ERR_UPSTREAM_ERROR"[^\n]*\n\n$/);
  const done = await finishedRequest(node, requestId);
  t.same(done.outcome, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
});

t.test('an upstream that ends its stream after the final message_delta without message_stop gives the caller the whole answer and a message_stop, recorded ok; one that ends before message_delta is still the caller\'s error', async (t) => {
  const withoutStop = FULL.slice(0, FULL.lastIndexOf('event: message_stop'));
  // The same events as data lines only (no `event:` lines), as some compatible servers send them.
  const dataOnly = withoutStop.replace(/^event: [a-z_]+\n/gm, '');
  const { node } = await nodeFor(t, (socket, _request, n) => {
    // Calls 1 and 2: everything but message_stop. Call 3: cut after the text, before message_delta.
    const body = n === 1 ? withoutStop : n === 2 ? dataOnly : withoutStop.slice(0, withoutStop.indexOf('event: content_block_stop'));
    socket.end(SSE_HEAD_CHUNKED + httpChunk(body) + '0\r\n\r\n');
  });
  for (const how of ['with event: lines', 'data lines only']) {
    const whole = await streamOverSdk(node);
    t.equal(whole.text, 'Hello there', how);
    t.same(whole.types.slice(-2), ['message_delta', 'message_stop'], `${how}: the SDK stream ends with message_stop and raises no error`);
    const done = await finishedRequest(node, whole.requestId);
    t.same(done.outcome, { status: 'ok', httpStatus: 200, errorCode: null }, how);
    t.match(done.usage, { outputTokens: 3 }, `${how}: metered on message_delta's counts`);
  }

  const { text, requestId } = await streamOverFetch(node);
  t.match(text, /event: error\ndata: [^\n]*ended the stream before message_stop[^\n]*\n\n$/, 'cut before message_delta: the node\'s error event');
  const cut = await finishedRequest(node, requestId);
  t.equal(cut.outcome.status, 'failed');
});
