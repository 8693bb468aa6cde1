// OpenAI-compatible streams that go wrong upstream, through the real app: before the first event
// (reset, stall, keep-alive comments only, an error, an empty body) the attempt fails and the route's
// fallback answers; after it, the stream ends with the node's own error event and the request is
// recorded failed; a complete answer ([DONE]) survives a later break; a stream request answered
// with JSON fails clearly; an upstream 429 is passed on with a Retry-After.
import type { Socket } from 'node:net';
import t from 'tap';
import OpenAI from 'openai';
import { TargetHealth } from '../../edge-node/src/routing/target-health.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { SSE_HEAD_CHUNKED, SSE_HEAD_CLOSE, chatChunk, httpChunk, startRawUpstream } from '../fixtures/raw-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import type { PipelineNode } from './pipeline/pipeline-harness.js';
import { sdkError, startPipelineNode } from './pipeline/pipeline-harness.js';

/** A node whose route `fb` goes to `primaryUrl` (upstream "demo") and falls back to `backupUrl`; `solo` has no fallback. */
function nodeWith(t: { teardown(fn: () => unknown): void }, primaryUrl: string, backupUrl: string, timeoutMs = 5_000, targetHealth?: TargetHealth): Promise<PipelineNode> {
  return startPipelineNode(t, {
    upstreamUrl: primaryUrl,
    ...(targetHealth !== undefined ? { services: { targetHealth } } : {}),
    bundle: (base) => ({
      upstreams: [...base.upstreams, { id: 'up-b', name: 'backup', kind: 'openai-compatible', baseUrl: backupUrl, apiKey: 'sk-backup-0000000000', timeoutMs: 30_000 }],
      routes: [
        { alias: 'fb', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [{ upstream: 'backup', model: 'demo-echo' }], timeoutMs, retries: 0 },
        { alias: 'solo', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [], timeoutMs, retries: 0 },
      ],
    }),
  });
}

/** One streaming chat call over plain fetch: the status, the whole body and how long it took. */
async function streamCall(node: PipelineNode, model: string, signal?: AbortSignal) {
  const started = Date.now();
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    ...(signal ? { signal } : {}),
  });
  const text = await res.text();
  return { res, text, ms: Date.now() - started, requestId: res.headers.get('x-request-id') };
}

function finishedRequest(node: PipelineNode, requestId: string | null) {
  return waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: 'the finished request' });
}

/** The text the caller's chunks carry, in order. */
function contentOf(sseText: string): string {
  let text = '';
  for (const event of sseText.split('\n\n')) {
    if (!event.startsWith('data: {')) continue;
    const chunk = JSON.parse(event.slice(6)) as { choices?: Array<{ delta?: { content?: string } }> };
    text += chunk.choices?.[0]?.delta?.content ?? '';
  }
  return text;
}

const errorChunk = `data: ${JSON.stringify({ error: { message: 'CUDA OOM on gpu-node-7.internal (key sk-live-internal-123)', type: 'server_error', code: 500 } })}\n\n`;
/** text-generation-inference's shape: the error is a string. */
const stringErrorChunk = `data: ${JSON.stringify({ error: 'CUDA OOM on gpu-node-7.internal (key sk-live-internal-123)', error_type: 'generation' })}\n\n`;

t.test('before the first event', async (t) => {
  t.test('an upstream that resets after its 200 headers is a failed attempt: the fallback answers', async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CHUNKED);
      setTimeout(() => socket.destroy(), 20);
    });
    const backup = await startFakeUpstream(t);
    const node = await nodeWith(t, primary.url, backup.url);
    const { res, text, requestId } = await streamCall(node, 'fb');
    t.equal(res.status, 200);
    t.equal(backup.requests.length, 1, 'the fallback was tried: nothing had reached the caller');
    t.match(contentOf(text), /echo: hi/);
    t.match(text, /data: \[DONE\]\n\n$/);
    const done = await finishedRequest(node, requestId);
    t.match(done.attempts, [{ upstream: 'demo', outcome: 'connect', httpStatus: null }, { upstream: 'backup', outcome: 'ok', httpStatus: 200 }]);
    t.equal(done.outcome.status, 'ok');
  });

  t.test('an upstream that stalls after its 200 headers times out under the route timeout, and the fallback answers', async (t) => {
    const primary = await startRawUpstream(t, (socket) => void socket.write(SSE_HEAD_CHUNKED));
    const backup = await startFakeUpstream(t);
    const node = await nodeWith(t, primary.url, backup.url, 400);
    const { res, text, requestId } = await streamCall(node, 'fb');
    t.equal(res.status, 200);
    t.match(contentOf(text), /echo: hi/);
    const done = await finishedRequest(node, requestId);
    t.match(done.attempts, [{ upstream: 'demo', outcome: 'timeout', httpStatus: null }, { upstream: 'backup', outcome: 'ok' }]);
  });

  t.test('an upstream that sends only keep-alive comments does not hold the caller past the route timeout', async (t) => {
    const timers: NodeJS.Timeout[] = [];
    t.teardown(() => timers.forEach((timer) => clearInterval(timer)));
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CLOSE);
      timers.push(setInterval(() => socket.write(': keep-alive\n\n'), 50));
    });
    const node = await nodeWith(t, primary.url, primary.url, 300);
    // The deadline only keeps a regression from hanging the suite; the answer comes after ~300 ms.
    const { res, text, requestId } = await streamCall(node, 'solo', AbortSignal.timeout(10_000));
    t.equal(res.status, 504, 'a proper status: no byte had been sent');
    t.equal(JSON.parse(text).error.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
    const done = await finishedRequest(node, requestId);
    t.same(done.outcome, { status: 'failed', httpStatus: 504, errorCode: 'ZN_ERR_UPSTREAM_TIMEOUT' });
    t.match(done.attempts, [{ upstream: 'demo', outcome: 'timeout' }]);
  });

  t.test('without a fallback, a reset before the first event is a 502 saying the upstream broke off its stream (not that it could not be reached), with the attempt recorded as failed', async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CHUNKED);
      setTimeout(() => socket.destroy(), 20);
    });
    const node = await nodeWith(t, primary.url, primary.url);
    const err = await sdkError(node.client().chat.completions.create({ model: 'solo', stream: true, messages: [{ role: 'user', content: 'hi' }] }));
    t.equal(err.status, 502);
    t.equal(err.code, 'ZN_ERR_UPSTREAM_UNAVAILABLE');
    t.match(err.message, /Upstream "demo" answered, then broke off its stream \([A-Z_]+\)\./);
    t.notMatch(err.message, /could not be reached/);
    const done = await finishedRequest(node, err.headers?.get('x-request-id') ?? null);
    t.same(done.outcome, { status: 'failed', httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_UNAVAILABLE' });
    t.match(done.attempts, [{ upstream: 'demo', outcome: 'connect', httpStatus: null }]);
  });

  t.test('an upstream error as the first event fails the attempt, and the fallback answers', async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CLOSE);
      socket.end(errorChunk);
    });
    const backup = await startFakeUpstream(t);
    const node = await nodeWith(t, primary.url, backup.url);
    const { res, text, requestId } = await streamCall(node, 'fb');
    t.equal(res.status, 200);
    t.match(contentOf(text), /echo: hi/);
    t.notMatch(text, /gpu-node-7|sk-live-internal/);
    const done = await finishedRequest(node, requestId);
    t.match(done.attempts, [{ upstream: 'demo', outcome: 'error', httpStatus: 200 }, { upstream: 'backup', outcome: 'ok' }]);
  });

  t.test('an upstream error chunk whose error is a string (TGI) as the first event fails the attempt too, and the fallback answers', async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CLOSE);
      socket.end(stringErrorChunk);
    });
    const backup = await startFakeUpstream(t);
    const node = await nodeWith(t, primary.url, backup.url);
    const { res, text, requestId } = await streamCall(node, 'fb');
    t.equal(res.status, 200);
    t.match(contentOf(text), /echo: hi/);
    t.notMatch(text, /gpu-node-7|sk-live-internal|CUDA/);
    t.equal(backup.requests.length, 1, 'the fallback was tried: nothing had reached the caller');
    const done = await finishedRequest(node, requestId);
    t.match(done.attempts, [{ upstream: 'demo', outcome: 'error', httpStatus: 200 }, { upstream: 'backup', outcome: 'ok' }]);
  });

  t.test("a stream request answered with a 200 JSON error object, in OpenAI's or Anthropic's shape, is that error: the attempt fails retryably and the fallback answers", async (t) => {
    const bodies = {
      chat: JSON.stringify({ error: { message: 'upstream overloaded (node gpu-7)', type: 'server_error', code: 'overloaded' } }),
      messages: JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }),
    };
    for (const [surface, payload] of Object.entries(bodies)) {
      const primary = await startRawUpstream(t, (socket) => {
        socket.end(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`);
      });
      if (surface === 'chat') {
        const backup = await startFakeUpstream(t);
        const node = await nodeWith(t, primary.url, backup.url);
        const { res, text, requestId } = await streamCall(node, 'fb');
        t.equal(res.status, 200, surface);
        t.match(text, /data: \[DONE\]\n\n$/, `${surface}: the fallback's stream`);
        const done = await finishedRequest(node, requestId);
        t.match(done.attempts, [{ upstream: 'demo', outcome: 'error', httpStatus: 200 }, { upstream: 'backup', outcome: 'ok' }], surface);
      } else {
        const node = await nodeWith(t, primary.url, primary.url);
        const res = await fetch(`${node.baseURL}/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
          body: JSON.stringify({ model: 'solo', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
        });
        // An Anthropic error object on the chat surface is still an error object: not "no event stream".
        const body = await res.text();
        t.equal(res.status, 502, surface);
        t.notMatch(body, /did not answer the stream request with an event stream/, surface);
        t.equal(res.headers.get('x-should-retry'), 'true', `${surface}: retryable, as the same error in a JSON answer`);
      }
    }
  });

  t.test('a stream request answered with JSON fails clearly instead of giving the SDK an empty stream', async (t) => {
    const payload = JSON.stringify({
      id: 'x',
      object: 'chat.completion',
      created: 1,
      model: 'demo-echo',
      choices: [{ index: 0, message: { role: 'assistant', content: 'hello there' }, finish_reason: 'stop' }],
    });
    const primary = await startRawUpstream(t, (socket) => {
      socket.end(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`);
    });
    const node = await nodeWith(t, primary.url, primary.url);
    const err = await sdkError(node.client().chat.completions.create({ model: 'solo', stream: true, messages: [{ role: 'user', content: 'hi' }] }));
    t.equal(err.status, 502);
    t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR');
    t.match(err.message, /did not answer the stream request with an event stream/);
    const done = await waitFor(() => node.finished.at(-1), { what: 'the finished request' });
    t.match(done.usage, { outputTokens: 0, estimated: true }, 'a whole answer without usage: metered from the prompt estimate (the upstream billed it)');
    t.ok(done.usage.inputTokens > 0, 'the prompt is charged');
  });
});

t.test('after the first event', async (t) => {
  t.test("an upstream error mid-stream ends the stream with the node's own error event, without the upstream's text, recorded failed", async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CLOSE);
      socket.write(chatChunk('Hello'));
      socket.write(errorChunk);
      socket.end('data: [DONE]\n\n');
    });
    const node = await nodeWith(t, primary.url, primary.url);
    const { res, text, requestId } = await streamCall(node, 'solo');
    t.equal(res.status, 200);
    t.equal(contentOf(text), 'Hello');
    t.notMatch(text, /gpu-node-7|sk-live-internal|CUDA/, "the upstream's own error text is not relayed");
    t.notMatch(text, /\[DONE\]/);
    t.match(text, /event: error\ndata: \{"error":\{"message":"Upstream \\"demo\\" ended the stream with an error \(server_error\)\.","type":"server_error","param":null,"code":"ZN_ERR_UPSTREAM_ERROR"\}\}\n\n$/);
    const done = await finishedRequest(node, requestId);
    t.same(done.outcome, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
  });

  t.test("an upstream `event: error` with text as the body's last event, without its blank line, after every choice finished, still fails the stream", async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CLOSE);
      socket.write(chatChunk('Hello'));
      socket.write(chatChunk(null));
      socket.end('event: error\ndata: upstream overloaded on gpu-node-7, output discarded\n');
    });
    const node = await nodeWith(t, primary.url, primary.url);
    const { text, requestId } = await streamCall(node, 'solo');
    t.equal(contentOf(text), 'Hello');
    t.notMatch(text, /\[DONE\]/, 'not completed as if the answer were whole');
    t.notMatch(text, /gpu-node-7|overloaded/, "the upstream's own error text is not relayed");
    t.match(text, /event: error\ndata: \{"error":\{[^\n]*"code":"ZN_ERR_UPSTREAM_ERROR"\}\}\n\n$/);
    const done = await finishedRequest(node, requestId);
    t.same(done.outcome, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
  });

  t.test("an upstream error chunk whose error is a string (TGI) mid-stream ends the stream with the node's own error event, without the upstream's text", async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CLOSE);
      socket.write(chatChunk('Hello'));
      socket.end(stringErrorChunk);
    });
    const node = await nodeWith(t, primary.url, primary.url);
    const { text, requestId } = await streamCall(node, 'solo');
    t.equal(contentOf(text), 'Hello');
    t.notMatch(text, /gpu-node-7|sk-live-internal|CUDA/, "the upstream's own error text is not relayed");
    t.match(text, /event: error\ndata: \{"error":\{"message":"Upstream \\"demo\\" ended the stream with an error\.","type":"server_error","param":null,"code":"ZN_ERR_UPSTREAM_ERROR"\}\}\n\n$/);
    const done = await finishedRequest(node, requestId);
    t.same(done.outcome, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
  });

  t.test('an upstream `event: error` mid-stream is handled the same way, and the SDK raises it', async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CLOSE);
      socket.write(chatChunk('Hello'));
      socket.end(`event: error\ndata: ${JSON.stringify({ error: { message: 'internal host db-7 said no', code: 'overloaded' } })}\n\n`);
    });
    const node = await nodeWith(t, primary.url, primary.url);
    const stream = await node.client().chat.completions.create({ model: 'solo', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const received: string[] = [];
    const err = await sdkError((async () => {
      for await (const chunk of stream) received.push(chunk.choices[0]?.delta.content ?? '');
    })());
    t.same(received, ['Hello']);
    t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR');
    t.match(err.message, /\(overloaded\)/);
    t.notMatch(err.message, /db-7/);
  });

  t.test('a close-delimited body cut mid-answer (no finish, no [DONE]) ends with an error event and is recorded failed', async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CLOSE);
      socket.write(chatChunk('Hello '));
      socket.write(chatChunk('wor'));
      socket.end();
    });
    const node = await nodeWith(t, primary.url, primary.url);
    const { text, requestId } = await streamCall(node, 'solo');
    t.equal(contentOf(text), 'Hello wor');
    t.match(text, /event: error\ndata: [^\n]*ended the stream before \[DONE\][^\n]*"code":"ZN_ERR_UPSTREAM_ERROR"/);
    const done = await finishedRequest(node, requestId);
    t.same(done.outcome, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
  });

  t.test('a finished answer whose upstream omits [DONE] is complete: the node adds [DONE] and records ok', async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CLOSE);
      socket.write(chatChunk('Hello'));
      socket.write(chatChunk(null));
      socket.end();
    });
    const node = await nodeWith(t, primary.url, primary.url);
    const { text, requestId } = await streamCall(node, 'solo');
    t.equal(contentOf(text), 'Hello');
    t.notMatch(text, /event: error/);
    t.match(text, /"finish_reason":"stop"[^\n]*\n\ndata: \[DONE\]\n\n$/);
    const done = await finishedRequest(node, requestId);
    t.equal(done.outcome.status, 'ok');
  });

  t.test('asked for n: 2, an upstream that ignores n and omits [DONE] is complete once the one choice it sent finished and the closing usage chunk came: recorded ok with the exact usage', async (t) => {
    const usageChunk = `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } })}\n\n`;
    const endings = [
      { name: 'with the usage chunk', tail: usageChunk, status: 'ok' },
      { name: 'without it (a cut before the other choice began looks the same)', tail: '', status: 'failed' },
    ];
    for (const ending of endings) {
      const primary = await startRawUpstream(t, (socket) => {
        socket.write(SSE_HEAD_CLOSE);
        socket.write(chatChunk('Hello'));
        socket.write(chatChunk(null));
        socket.end(ending.tail);
      });
      const node = await nodeWith(t, primary.url, primary.url);
      const res = await fetch(`${node.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
        body: JSON.stringify({ model: 'solo', stream: true, n: 2, messages: [{ role: 'user', content: 'hi' }] }),
      });
      const text = await res.text();
      const done = await finishedRequest(node, res.headers.get('x-request-id'));
      t.equal(done.outcome.status, ending.status, ending.name);
      if (ending.status === 'ok') {
        t.match(text, /data: \[DONE\]\n\n$/, ending.name);
        t.notMatch(text, /event: error/, ending.name);
        t.same(done.usage, { inputTokens: 3, outputTokens: 1, estimated: false }, ending.name);
      } else {
        t.match(text, /ended the stream before \[DONE\]/, ending.name);
      }
    }
  });

  t.test('a connection break after [DONE] keeps the complete answer and its exact usage, recorded ok', async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CHUNKED);
      socket.write(httpChunk(chatChunk('Hello')));
      socket.write(httpChunk(chatChunk(null)));
      socket.write(httpChunk(`data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } })}\n\n`));
      socket.write(httpChunk('data: [DONE]\n\n'), () => setTimeout(() => socket.destroy(), 30)); // no terminating chunk
    });
    const node = await nodeWith(t, primary.url, primary.url);
    const { text, requestId } = await streamCall(node, 'solo');
    t.match(text, /data: \[DONE\]\n\n$/);
    t.notMatch(text, /event: error/);
    const done = await finishedRequest(node, requestId);
    t.same(done.outcome, { status: 'ok', httpStatus: 200, errorCode: null });
    t.same(done.usage, { inputTokens: 3, outputTokens: 1, estimated: false });
  });

  t.test('an upstream that sends only keep-alive comments after the first event is cut after the route timeout: an error event with ZN_ERR_UPSTREAM_TIMEOUT, recorded failed with its attempt a timeout, and counted toward ejecting the target', async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CHUNKED);
      socket.write(httpChunk(chatChunk('Hello')));
      const keepAlive = setInterval(() => socket.write(httpChunk(': keep-alive\n\n')), 100);
      socket.on('close', () => clearInterval(keepAlive));
    });
    const backup = await startFakeUpstream(t);
    const node = await nodeWith(t, primary.url, backup.url, 600, new TargetHealth({ failureThreshold: 2 }));
    for (let i = 0; i < 2; i++) {
      const { text, ms, requestId } = await streamCall(node, 'solo', AbortSignal.timeout(10_000));
      t.equal(contentOf(text), 'Hello');
      t.match(text, /event: error\ndata: [^\n]*"code":"ZN_ERR_UPSTREAM_TIMEOUT"\}\}\n\n$/);
      t.ok(ms >= 600 && ms < 5_000, `the stream ended after ${ms} ms: about the 600 ms timeout after its last event, though comments kept coming`);
      const done = await finishedRequest(node, requestId);
      t.same(done.outcome, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_UPSTREAM_TIMEOUT' });
      t.equal(done.usage.estimated, true, 'the partial answer is metered');
      t.ok(done.usage.outputTokens > 0);
      t.same(done.attempts.map((a) => a.outcome), ['timeout'], 'the upstream attempt is a failed one');
      t.ok(done.attempts[0]!.durationMs >= 600, 'lasting until the failure');
    }
    // Two failed streams in a row ejected the target: the fallback is now tried first.
    const { text, requestId } = await streamCall(node, 'fb', AbortSignal.timeout(10_000));
    t.match(text, /data: \[DONE\]\n\n$/);
    const done = await finishedRequest(node, requestId);
    t.same(done.attempts.map((a) => a.upstream), ['backup']);
  });

  t.test('a connection reset after every choice finished and the usage chunk came, before [DONE], keeps the complete answer: [DONE] added, recorded ok with the exact usage', async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CHUNKED);
      socket.write(httpChunk(chatChunk('Hello')));
      socket.write(httpChunk(chatChunk(null)));
      socket.write(httpChunk(`data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [], usage: { prompt_tokens: 500, completion_tokens: 700, total_tokens: 1200 } })}\n\n`), () => setTimeout(() => socket.resetAndDestroy(), 30));
    });
    const node = await nodeWith(t, primary.url, primary.url);
    const { text, requestId } = await streamCall(node, 'solo', AbortSignal.timeout(10_000));
    t.equal(contentOf(text), 'Hello');
    t.notMatch(text, /event: error/);
    t.match(text, /"finish_reason":"stop"[^\n]*\n\ndata: \[DONE\]\n\n$/);
    const done = await finishedRequest(node, requestId);
    t.same(done.outcome, { status: 'ok', httpStatus: 200, errorCode: null });
    t.same(done.usage, { inputTokens: 500, outputTokens: 700, estimated: false });
    t.same(done.attempts.map((a) => a.outcome), ['ok']);
  });

  // A running usage block on the first chunk (prompt counted, nothing generated yet) is no final
  // count: whether the body then breaks or ends without [DONE], the delivered text is metered.
  for (const [ending, end] of [
    ['a connection reset', (socket: Socket) => setTimeout(() => socket.resetAndDestroy(), 30)],
    ['a clean end without [DONE]', (socket: Socket) => socket.end('0\r\n\r\n')],
  ] as const) {
    t.test(`${ending} after every choice finished, with only an early running usage block, meters at least the delivered text`, async (t) => {
      const words = 'lorem ipsum dolor sit amet consectetur adipiscing elit '.repeat(40);
      const primary = await startRawUpstream(t, (socket) => {
        socket.write(SSE_HEAD_CHUNKED);
        socket.write(httpChunk(chatChunk('', { usage: { prompt_tokens: 5, completion_tokens: 0, total_tokens: 5 } })));
        socket.write(httpChunk(chatChunk(words)));
        socket.write(httpChunk(chatChunk(null)), () => end(socket));
      });
      const node = await nodeWith(t, primary.url, primary.url);
      const { text, requestId } = await streamCall(node, 'solo', AbortSignal.timeout(10_000));
      t.equal(contentOf(text), words);
      t.match(text, /data: \[DONE\]\n\n$/, 'the node adds [DONE] for the finished answer');
      const done = await finishedRequest(node, requestId);
      t.same(done.outcome, { status: 'ok', httpStatus: 200, errorCode: null });
      t.equal(done.usage.estimated, true, 'the running count is no final one: the estimate from the delivered text');
      t.ok(done.usage.outputTokens > 100, `${done.usage.outputTokens} output tokens for ${words.length} delivered characters`);
    });
  }

  t.test('an upstream that stalls after [DONE] does not hold back the caller’s [DONE] for its timeout', async (t) => {
    const primary = await startRawUpstream(t, (socket) => {
      socket.write(SSE_HEAD_CHUNKED);
      socket.write(httpChunk(chatChunk('Hello')));
      socket.write(httpChunk(chatChunk(null)));
      socket.write(httpChunk('data: [DONE]\n\n')); // and then nothing, not even the last chunk
    });
    const node = await nodeWith(t, primary.url, primary.url, 20_000);
    const { text, ms, requestId } = await streamCall(node, 'solo', AbortSignal.timeout(15_000));
    t.match(text, /data: \[DONE\]\n\n$/);
    t.ok(ms < 10_000, `the answer ended after ${ms} ms, well before the 20 s timeout`);
    const done = await finishedRequest(node, requestId);
    t.equal(done.outcome.status, 'ok');
  });
});

t.test('an upstream 429 is passed on as a rate limit with a bounded Retry-After', async (t) => {
  const answers: string[] = [];
  const primary = await startRawUpstream(t, (socket) => {
    const retryAfter = answers.shift();
    const body = JSON.stringify({ error: { message: 'slow down, org org-123', type: 'requests', code: 'rate_limit_exceeded' } });
    const header = retryAfter === undefined ? '' : `retry-after: ${retryAfter}\r\n`;
    socket.end(`HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n${header}content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  });
  const node = await nodeWith(t, primary.url, primary.url);
  const ask = { model: 'solo', messages: [{ role: 'user' as const, content: 'hi' }] };
  for (const [given, passed] of [['7', '7'], ['99999', '3600'], ['soon', '1'], [undefined, '1'], [new Date(Date.now() + 120_000).toUTCString(), /^1[12][0-9]$/]] as const) {
    if (given !== undefined) answers.push(given);
    const err = await sdkError(node.client().chat.completions.create(ask));
    t.ok(err instanceof OpenAI.RateLimitError, `429 (Retry-After ${given}) is the SDK's RateLimitError`);
    t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR');
    t.equal(err.type, 'rate_limit_error');
    t.match(err.headers?.get('retry-after'), passed, `upstream Retry-After ${given} is passed on as ${String(passed)}`);
    t.notMatch(err.message, /org-123/);
  }
});
