// What callers see when the upstream fails: error statuses, a closed port, slowness, a stream
// that breaks off; and that a caller who leaves mid-stream stops the upstream call.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import OpenAI, { APIError } from 'openai';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { freePort } from '../fixtures/free-port.js';
import { waitFor } from '../fixtures/wait-for.js';
import { UPSTREAM_KEY, startNode, testConfig } from './node-harness.js';

const GENERATED_ID = /^req_[0-9A-HJKMNP-TV-Z]{26}$/;
const ask = { model: 'echo', messages: [{ role: 'user' as const, content: 'hello' }] };

async function apiError(promise: Promise<unknown>): Promise<APIError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof APIError) return err;
    throw err;
  }
  throw new Error('expected the call to fail with an APIError');
}

t.test('an upstream 500 becomes 502 ZN_ERR_UPSTREAM_ERROR without the upstream message', async (t) => {
  const upstream = await startFakeUpstream(t, { failNext: { count: 1, status: 500, body: { error: { message: 'boom at db-host-17 with sk-internal', type: 'server_error' } } } });
  const node = await startNode(t, testConfig(upstream.url));
  const err = await apiError(node.client().chat.completions.create(ask));
  t.equal(err.status, 502);
  t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR');
  t.match(err.headers?.get('x-request-id'), GENERATED_ID);
  t.notMatch(err.message, /db-host-17|sk-internal/, "the upstream's own message is not passed on");
  const next = await node.client().chat.completions.create(ask);
  t.ok(next.choices[0]?.message.content, 'the next call succeeds');
});

t.test("an upstream 4xx keeps its status, its error code and its message, the node's upstream key redacted", async (t) => {
  const upstream = await startFakeUpstream(t, {
    failNext: { count: 1, status: 400, body: { error: { message: `prompt too long for key ${UPSTREAM_KEY}`, type: 'invalid_request_error', code: 'context_length_exceeded' } } },
  });
  const node = await startNode(t, testConfig(upstream.url));
  const err = await apiError(node.client().chat.completions.create(ask));
  t.equal(err.status, 400);
  t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR');
  t.equal(err.type, 'invalid_request_error');
  t.match(err.message, /context_length_exceeded/);
  t.match(err.message, 'prompt too long for key [redacted]');
  t.notOk(err.message.includes(UPSTREAM_KEY));
});

t.test("an upstream 401 (the node's upstream key is wrong) is not passed on as the caller's 401", async (t) => {
  const upstream = await startFakeUpstream(t, { failNext: { count: 1, status: 401 } });
  const node = await startNode(t, testConfig(upstream.url));
  const err = await apiError(node.client().chat.completions.create(ask));
  t.equal(err.status, 502);
  t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR');
});

t.test('an upstream on a closed port gives 502 ZN_ERR_UPSTREAM_UNAVAILABLE', async (t) => {
  const port = await freePort(); // nothing listens there; outside the ephemeral range, so no listen(0) takes it meanwhile
  const node = await startNode(t, testConfig(`http://127.0.0.1:${port}/v1`));
  const err = await apiError(node.client().chat.completions.create(ask));
  t.equal(err.status, 502);
  t.equal(err.code, 'ZN_ERR_UPSTREAM_UNAVAILABLE');
  t.match(err.headers?.get('x-request-id'), GENERATED_ID);
  const streamed = await apiError(node.client().chat.completions.create({ ...ask, stream: true }));
  t.equal(streamed.code, 'ZN_ERR_UPSTREAM_UNAVAILABLE', 'a stream that never started fails the same way');
});

t.test('an upstream slower than its timeout gives 504 ZN_ERR_UPSTREAM_TIMEOUT', async (t) => {
  const upstream = await startFakeUpstream(t, { latencyMs: 60_000 });
  const config = testConfig(upstream.url);
  config.upstreams[0]!.timeoutMs = 300;
  const node = await startNode(t, config);
  const err = await apiError(node.client().chat.completions.create(ask));
  t.equal(err.status, 504);
  t.equal(err.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
  t.match(err.headers?.get('x-request-id'), GENERATED_ID);
});

t.test('an upstream that dies mid-stream ends the caller stream with an error event carrying the code', async (t) => {
  // The delay lets the first chunks leave the upstream before it destroys its socket.
  const upstream = await startFakeUpstream(t, { dropStreamAfterChunks: 4, chunkDelayMs: 20 });
  const node = await startNode(t, testConfig(upstream.url));
  const stream = await node.client().chat.completions.create({ ...ask, stream: true });
  const received: string[] = [];
  const err = await apiError((async () => {
    for await (const chunk of stream) received.push(chunk.choices[0]?.delta.content ?? '');
  })());
  t.ok(received.length >= 1, 'the chunks before the break arrived');
  t.ok(`[zenova demo upstream] echo: hello`.startsWith(received.join('')), 'they are the start of the answer');
  t.equal(err.code, 'ZN_ERR_UPSTREAM_UNAVAILABLE');
  const finished = await waitFor(() => node.logs().find((l) => l.msg === 'request finished' && l.stream === true), { what: 'the request log line' });
  t.equal(finished.errorCode, 'ZN_ERR_UPSTREAM_UNAVAILABLE');
});

t.test('a caller that disconnects mid-stream aborts the upstream request', async (t) => {
  // An upstream that sends one chunk and then holds the stream open, noting when its socket closes.
  let upstreamClosed = false;
  let upstreamRequests = 0;
  const hanging = http.createServer((req, res) => {
    upstreamRequests++;
    req.resume();
    res.on('close', () => {
      upstreamClosed = true;
    });
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const chunk = { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index: 0, delta: { content: 'first' }, finish_reason: null }] };
    res.write(`data: ${JSON.stringify(chunk)}\n\n`);
  });
  await new Promise<void>((resolve) => hanging.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => {
    hanging.closeAllConnections();
    hanging.close(() => resolve());
  }));
  const { port } = hanging.address() as AddressInfo;
  const node = await startNode(t, testConfig(`http://127.0.0.1:${port}/v1`));

  const controller = new AbortController();
  const stream = await node.client().chat.completions.create({ ...ask, stream: true }, { signal: controller.signal });
  let first: string | undefined;
  try {
    for await (const chunk of stream) {
      first = chunk.choices[0]?.delta.content ?? '';
      controller.abort();
    }
  } catch (err) {
    t.ok(err instanceof OpenAI.APIUserAbortError || (err as Error).name === 'AbortError', 'the client stopped on its own abort');
  }
  t.equal(first, 'first');
  t.equal(upstreamRequests, 1);
  await waitFor(() => upstreamClosed, { what: 'the upstream to see its request socket close' });
  const finished = await waitFor(() => node.logs().find((l) => l.msg === 'request finished' && l.callerAborted === true), { what: 'the log line of the abandoned request' });
  t.equal(finished.stream, true);
  t.notOk(node.logLines.join('\n').includes(UPSTREAM_KEY));
});
