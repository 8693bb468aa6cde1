// An Anthropic upstream that answers a stream request with an `event: error` as its first event has
// reported an error before anything reached the caller: with no attempt left, the caller gets the
// status an upstream HTTP error of that error's type gets (a rate_limit_error 429 with Retry-After,
// an invalid_request_error 400, an overloaded_error 502), and, as a mid-stream error event keeps
// it, the upstream's own type in the body. Before, every such error was a 502 api_error.
import http from 'node:http';
import t from 'tap';
import { listenForTest } from '../../fixtures/loopback-server.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { startPipelineNode } from './pipeline-harness.js';
import type { PipelineNode } from './pipeline-harness.js';

type Answer = { status: number; headers?: Record<string, string>; body: string };

/** An upstream that gives every request the answer set last, counting the requests. */
async function scriptedUpstream(t: { teardown(fn: () => unknown): void }): Promise<{ url: string; answer: Answer; calls: number }> {
  const state = { url: '', answer: { status: 500, body: '' } as Answer, calls: 0 };
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      state.calls += 1;
      res.writeHead(state.answer.status, state.answer.headers ?? {});
      res.end(state.answer.body);
    });
  });
  state.url = await listenForTest(t, server);
  return state;
}

const errorBody = (type: string): string => JSON.stringify({ type: 'error', error: { type, message: `upstream says ${type}` } });

/** The error as the first (and only) event of a 200 event stream. */
const inBand = (type: string, headers: Record<string, string> = {}): Answer => ({
  status: 200,
  headers: { 'content-type': 'text/event-stream', ...headers },
  body: `event: error\ndata: ${errorBody(type)}\n\n`,
});

/** The error as an HTTP status. */
const asStatus = (status: number, type: string, headers: Record<string, string> = {}): Answer => ({
  status,
  headers: { 'content-type': 'application/json', ...headers },
  body: errorBody(type),
});

async function setUp(t: { teardown(fn: () => unknown): void }) {
  const upstream = await scriptedUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base) => ({
      upstreams: [...base.upstreams, { id: 'up-claude', name: 'claude', kind: 'anthropic', baseUrl: upstream.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 30_000 }],
      // One retry: an error retryable like a 5xx is sent twice, as an HTTP 529 is.
      routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 1 }],
    }),
  });
  return { upstream, node };
}

async function streamRequest(node: PipelineNode) {
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude', max_tokens: 10, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await res.text();
  const requestId = res.headers.get('x-request-id');
  return {
    status: res.status,
    retryAfter: res.headers.get('retry-after'),
    shouldRetry: res.headers.get('x-should-retry'),
    error: (JSON.parse(text) as { error: { type: string; code: string } }).error,
    finished: await waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: `the finished request ${String(requestId)}` }),
  };
}

t.test('a rate_limit_error as the first event is answered 429 with the stream answer’s Retry-After (else 1), as an upstream HTTP 429 is', async (t) => {
  const { upstream, node } = await setUp(t);
  upstream.answer = asStatus(429, 'rate_limit_error', { 'retry-after': '7' });
  const http429 = await streamRequest(node);
  upstream.answer = inBand('rate_limit_error', { 'retry-after': '7' });
  const limited = await streamRequest(node);
  t.equal(limited.status, 429);
  t.equal(limited.status, http429.status, 'the status of an upstream HTTP 429');
  t.equal(limited.retryAfter, '7', 'the upstream’s own Retry-After');
  t.equal(limited.shouldRetry, 'true');
  t.match(limited.error, { type: 'rate_limit_error', code: 'ZN_ERR_UPSTREAM_ERROR' });
  t.match(limited.finished.outcome, { status: 'failed', httpStatus: 429, errorCode: 'ZN_ERR_UPSTREAM_ERROR' }, 'recorded with the status answered');
  t.match(limited.finished.attempts, [{ outcome: 'error', httpStatus: null }], 'each attempt an error reported in the stream, with no HTTP error status');

  upstream.answer = inBand('rate_limit_error');
  const noHint = await streamRequest(node);
  t.equal(noHint.status, 429);
  t.equal(noHint.retryAfter, '1', 'the default wait, as for an HTTP 429 without one');
});

t.test('an invalid_request_error as the first event is a final 400 invalid_request_error, as an upstream HTTP 400 is', async (t) => {
  const { upstream, node } = await setUp(t);
  upstream.answer = asStatus(400, 'invalid_request_error');
  const http400 = await streamRequest(node);
  const callsBefore = upstream.calls;
  upstream.answer = inBand('invalid_request_error');
  const refused = await streamRequest(node);
  t.equal(refused.status, 400);
  t.equal(refused.status, http400.status, 'the status of an upstream HTTP 400');
  t.equal(refused.shouldRetry, 'false');
  t.equal(refused.retryAfter, null);
  t.match(refused.error, { type: 'invalid_request_error', code: 'ZN_ERR_UPSTREAM_ERROR' });
  t.equal(upstream.calls - callsBefore, 1, 'not retried');
  t.match(refused.finished.outcome, { status: 'failed', httpStatus: 400, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
});

t.test('an overloaded_error as the first event is retried and answered 502, as an upstream HTTP 529 is, keeping its type', async (t) => {
  const { upstream, node } = await setUp(t);
  upstream.answer = asStatus(529, 'overloaded_error');
  const http529 = await streamRequest(node);
  const httpCalls = upstream.calls;
  upstream.answer = inBand('overloaded_error');
  const overloaded = await streamRequest(node);
  t.equal(overloaded.status, 502);
  t.equal(overloaded.status, http529.status, 'the status of an upstream HTTP 529');
  t.equal(overloaded.shouldRetry, 'true');
  t.equal(upstream.calls - httpCalls, httpCalls, 'retried as often as an HTTP 529');
  t.match(overloaded.error, { type: 'overloaded_error', code: 'ZN_ERR_UPSTREAM_ERROR' }, 'the upstream’s type, as a mid-stream error event keeps it');
  t.match(overloaded.finished.outcome, { status: 'failed', httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
  t.match(overloaded.finished.attempts, [{ outcome: 'error' }, { outcome: 'error' }]);
});

t.test('the node’s own key refused in band stays the node’s 502 api_error, not the caller’s authentication_error', async (t) => {
  const { upstream, node } = await setUp(t);
  upstream.answer = inBand('authentication_error');
  const refused = await streamRequest(node);
  t.equal(refused.status, 502);
  t.equal(refused.shouldRetry, 'false');
  t.match(refused.error, { type: 'api_error', code: 'ZN_ERR_UPSTREAM_ERROR' });
});
