// An attempt the upstream bills though its answer never reaches the caller is charged the prompt:
// one that times out once the upstream had the whole request (as a caller who leaves then is: the
// upstream goes on with it), and an answer compressed although identity was asked for. Its final
// failure tells SDKs not to resend (each resend would be billed again); an answer from a later
// attempt is charged by its own usage (an attempt that timed out before the request went out is
// charged nothing: caller-left-before-answer.test.ts; docs/billing.md, "Stage settle").
import http from 'node:http';
import zlib from 'node:zlib';
import t from 'tap';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { chatCompletionJson } from '../../fixtures/canned-answers.js';
import { listenForTest, silentStreamUpstream } from '../../fixtures/loopback-server.js';
import { startRawUpstream } from '../../fixtures/raw-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';
import { pricedNode } from './priced-node.js';

const PROMPT = 'List every lock on the Grand Canal between Hangzhou and Beijing, with its year.';

async function ask(node: PipelineNode, stream = false): Promise<Response> {
  return fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', stream, max_tokens: 50, messages: [{ role: 'user', content: PROMPT }] }),
    signal: AbortSignal.timeout(10_000),
  });
}

const shortTimeout =
  (retries: number) =>
  <R extends { timeoutMs: number; retries: number }>(route: R): R => ({ ...route, timeoutMs: 300, retries });

/**
 * shortTimeout(1) with a fallback on the same upstream: a JSON answer that timed out once the target
 * had the request is not retried there (it goes on with it and would bill a retry too), so a second
 * attempt needs a second target.
 */
const withFallback = <R extends { timeoutMs: number; retries: number; targets: Array<{ upstream: string; model: string }> }>(route: R): R => ({
  ...shortTimeout(1)(route),
  fallbacks: route.targets.map(({ upstream, model }) => ({ upstream, model })),
});

t.test('a JSON answer that never comes in time is charged the prompt once, however many attempts the upstream had, and the 504 says not to resend', async (t) => {
  const upstream = await startFakeUpstream(t, { hang: true });
  const { node, finished } = await pricedNode(t, upstream.url, { route: withFallback });
  const res = await ask(node);
  t.equal(res.status, 504);
  t.equal(((await res.json()) as { error: { code: string } }).error.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
  t.equal(res.headers.get('x-should-retry'), 'false', 'a resend would be charged again');
  t.equal(upstream.requests.length, 2, 'the target once (its retry not spent on it), then the fallback');
  const f = await waitFor(() => finished[0], { what: 'the record' });
  t.equal(f.status, 'failed');
  t.equal(f.upstream, 'demo', 'recorded against the upstream that had the request');
  t.ok(f.usage.inputTokens >= PROMPT.length / 4, 'the prompt is estimated');
  t.same(f.usage, { inputTokens: f.usage.inputTokens, outputTokens: 0, estimated: true });
  t.equal(f.cost.costMicros, f.usage.inputTokens, 'the prompt at its price, once');
});

t.test('a stream whose first event never comes in time is charged the prompt too', async (t) => {
  const { url, received } = await silentStreamUpstream(t);
  const { node, finished } = await pricedNode(t, url, { route: shortTimeout(0) });
  const res = await ask(node, true);
  t.equal(res.status, 504);
  await res.body?.cancel();
  t.equal(res.headers.get('x-should-retry'), 'false');
  t.equal(received(), 1);
  const f = await waitFor(() => finished[0], { what: 'the record' });
  t.equal(f.upstream, 'demo');
  t.ok(f.usage.inputTokens > 0 && f.usage.estimated);
  t.equal(f.cost.costMicros, f.usage.inputTokens);
});

t.test('when a fallback answers after an attempt timed out, the answer’s own usage is what is charged', async (t) => {
  let received = 0;
  const url = await listenForTest(
    t,
    http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        received += 1;
        if (received === 1) return; // the first attempt: no answer (the connection closes at teardown)
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(chatCompletionJson('Many.', { prompt_tokens: 40, completion_tokens: 3 }));
      });
    }),
  );
  const { node, finished } = await pricedNode(t, url, { route: withFallback });
  const res = await ask(node);
  t.equal(res.status, 200);
  await res.json();
  const f = await waitFor(() => finished[0], { what: 'the record' });
  t.same(f.usage, { inputTokens: 40, outputTokens: 3, estimated: false });
  t.equal(f.cost.costMicros, 40 + 3 * 10);
});

t.test('an answer compressed although identity was asked for is charged the prompt, and the 502 says not to resend', async (t) => {
  const gz = zlib.gzipSync(chatCompletionJson('plain', { prompt_tokens: 30, completion_tokens: 1 }));
  let received = 0;
  const up = await startRawUpstream(t, (socket) => {
    received += 1;
    socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\ncontent-length: ${gz.length}\r\n\r\n`);
    socket.write(gz);
  });
  const { node, finished } = await pricedNode(t, up.url, { route: shortTimeout(1) });
  const res = await ask(node);
  t.equal(res.status, 502);
  t.match(((await res.json()) as { error: { message: string } }).error.message, /Content-Encoding "gzip"/);
  t.equal(res.headers.get('x-should-retry'), 'false');
  t.equal(received, 1, 'not retried on the target that did the work');
  const f = await waitFor(() => finished[0], { what: 'the record' });
  t.equal(f.upstream, 'demo');
  t.same(f.usage, { inputTokens: f.usage.inputTokens, outputTokens: 0, estimated: true });
  t.ok(f.usage.inputTokens > 0);
  t.equal(f.cost.costMicros, f.usage.inputTokens);
});

t.test('an upstream 503 or 429 whose error body stalls past the timeout is charged nothing: the upstream refused the work', async (t) => {
  for (const status of [503, 429]) {
    const up = await startRawUpstream(t, (socket) => {
      socket.write(`HTTP/1.1 ${status} Busy\r\ncontent-type: application/json\r\ncontent-length: 60\r\n\r\n{"error":{"message":"over`);
    });
    const { node, finished } = await pricedNode(t, up.url, { route: shortTimeout(0) });
    const res = await ask(node);
    await res.text();
    const f = await waitFor(() => finished[0], { what: 'the record' });
    t.equal(f.cost.costMicros, 0, `${status}: not charged`);
    t.equal(f.upstream, undefined, `${status}: recorded as served by no upstream`);
  }
});
