// A non-streamed answer's per-target timeout (`timeoutMs`) bounds connecting and its headers; its
// body may then take as long as it keeps coming, each gap between two chunks bounded by the same
// timeoutMs (docs/node-api.md, docs/api.md). It used to cover the whole body, so a healthy upstream
// that sent its JSON slowly was cut with 504 and the request sent again to a fallback (billed twice).
// A body that stalls is still a timeout, and (nothing having reached the caller) falls back, not
// retried on that target: its headers came once it was done, so it bills the work.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { anthropicMessageJson, chatCompletionJson, embeddingsJson } from '../../fixtures/canned-answers.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { httpChunk, startRawUpstream } from '../../fixtures/raw-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { BODY_DEADLINE_FACTOR } from '../../../edge-node/src/routing/forward-plan.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';

type Teardown = { teardown(fn: () => unknown): void };

const TIMEOUT_MS = 400;
/** The pace of the slow body: a keep-alive newline every GAP_MS, KEEPALIVES of them (1.2 s, 3× the timeout). */
const GAP_MS = 100;
const KEEPALIVES = 12;

const CHAT_ANSWER = chatCompletionJson('slow but sure');
const EMBEDDINGS_ANSWER = embeddingsJson();
const MESSAGES_ANSWER = anthropicMessageJson('slow but sure');

interface SlowBody {
  url: string;
  requests: () => number;
  /** Keep-alive newlines written so far. */
  newlines: number;
  /** Whether the body stopped coming (stall mode) before the node hung up. */
  stalledBeforeClose: boolean | undefined;
}

/**
 * A 200 JSON head at once, then a keep-alive newline every GAP_MS, then `answer` — or, with
 * `stall`, the answer's first bytes and nothing more.
 */
async function slowJsonUpstream(t: Teardown, answer: string, opts: { stall: boolean }): Promise<SlowBody> {
  let stalled = false;
  const state: SlowBody = { url: '', requests: () => raw.requests, newlines: 0, stalledBeforeClose: undefined };
  const raw = await startRawUpstream(t, async (socket) => {
    socket.once('close', () => (state.stalledBeforeClose ??= stalled));
    socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n');
    for (let i = 0; i < KEEPALIVES; i++) {
      await sleep(GAP_MS);
      if (socket.destroyed) return;
      socket.write(httpChunk('\n'));
      state.newlines++;
    }
    if (opts.stall) {
      socket.write(httpChunk(answer.slice(0, 10)));
      stalled = true;
      return;
    }
    socket.end(`${httpChunk(answer)}0\r\n\r\n`);
  });
  state.url = raw.url;
  return state;
}

function post(node: PipelineNode, path: string, body: unknown, headers: Record<string, string> = { authorization: `Bearer ${node.secret}` }): Promise<Response> {
  return fetch(`${node.origin}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
}

async function attemptsOf(node: PipelineNode, res: Response): Promise<unknown[]> {
  const id = res.headers.get('x-request-id');
  const done = await waitFor(() => node.finished.find((f) => f.requestId === id), { what: 'the request to finish' });
  return done.attempts;
}

const chat = (model: string) => ({ model, messages: [{ role: 'user', content: 'hi' }] });

/** A node whose route `slow` goes to `upstreamUrl` (as "demo") under TIMEOUT_MS, falling back to "backup". */
async function nodeWithFallback(t: Teardown, upstreamUrl: string, backupUrl: string): Promise<PipelineNode> {
  return startPipelineNode(t, {
    upstreamUrl,
    bundle: (base) => ({
      upstreams: [...base.upstreams, { id: 'up-b', name: 'backup', kind: 'openai-compatible', baseUrl: backupUrl, apiKey: 'sk-backup', timeoutMs: 30_000 }],
      routes: [{ alias: 'slow', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [{ upstream: 'backup', model: 'demo-echo' }], timeoutMs: TIMEOUT_MS, retries: 1 }],
    }),
  });
}

t.test('a chat answer whose JSON keeps coming for longer than timeoutMs is served, and neither a retry nor the fallback is sent', async (t) => {
  const up = await slowJsonUpstream(t, CHAT_ANSWER, { stall: false });
  const backup = await startFakeUpstream(t);
  const node = await nodeWithFallback(t, up.url, backup.url);
  const res = await post(node, '/v1/chat/completions', chat('slow'));
  const body = (await res.json()) as { model?: string; choices?: Array<{ message: { content: string } }> };
  t.equal(res.status, 200, JSON.stringify(body));
  t.equal(body.model, 'slow');
  t.equal(body.choices?.[0]?.message.content, 'slow but sure');
  t.equal(up.newlines, KEEPALIVES, 'the whole slow body was sent');
  t.equal(up.requests(), 1, 'no retry');
  t.equal(backup.requests.length, 0, 'the fallback was not called');
  t.match(await attemptsOf(node, res), [{ upstream: 'demo', outcome: 'ok', httpStatus: 200 }]);
});

t.test('an embeddings answer whose JSON keeps coming for longer than timeoutMs is served', async (t) => {
  const up = await slowJsonUpstream(t, EMBEDDINGS_ANSWER, { stall: false });
  const node = await startPipelineNode(t, {
    upstreamUrl: up.url,
    bundle: () => ({ routes: [{ alias: 'slow', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [], timeoutMs: TIMEOUT_MS, retries: 0 }] }),
  });
  const res = await post(node, '/v1/embeddings', { model: 'slow', input: 'hi' });
  const body = (await res.json()) as { model?: string; data?: unknown[] };
  t.equal(res.status, 200, JSON.stringify(body));
  t.equal(body.model, 'slow');
  t.same(body.data, [{ object: 'embedding', index: 0, embedding: [0.5, 0.25] }]);
  t.equal(up.requests(), 1);
});

t.test('an Anthropic messages answer whose JSON keeps coming for longer than timeoutMs is served', async (t) => {
  const up = await slowJsonUpstream(t, MESSAGES_ANSWER, { stall: false });
  const node = await startPipelineNode(t, {
    upstreamUrl: up.url,
    bundle: (base) => ({
      upstreams: [{ id: 'up-c', name: 'claude', kind: 'anthropic', baseUrl: up.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 30_000 }],
      routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: TIMEOUT_MS, retries: 0 }],
    }),
  });
  const res = await post(node, '/v1/messages', { model: 'claude', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] }, { 'x-api-key': node.secret });
  const body = (await res.json()) as { model?: string; content?: unknown[] };
  t.equal(res.status, 200, JSON.stringify(body));
  t.equal(body.model, 'claude');
  t.same(body.content, [{ type: 'text', text: 'slow but sure' }]);
  t.equal(up.requests(), 1);
});

t.test('a JSON body that keeps coming and then stalls for longer than timeoutMs is cut after the stall as ZN_ERR_UPSTREAM_TIMEOUT', async (t) => {
  const up = await slowJsonUpstream(t, CHAT_ANSWER, { stall: true });
  const node = await startPipelineNode(t, {
    upstreamUrl: up.url,
    bundle: () => ({ routes: [{ alias: 'slow', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [], timeoutMs: TIMEOUT_MS, retries: 0 }] }),
  });
  const res = await post(node, '/v1/chat/completions', chat('slow'));
  const body = (await res.json()) as { error?: { code?: string } };
  t.equal(res.status, 504, JSON.stringify(body));
  t.equal(body.error?.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
  await waitFor(() => up.stalledBeforeClose !== undefined, { what: 'the node to hang up on the upstream' });
  t.equal(up.stalledBeforeClose, true, 'the node hung up only once the body stopped coming');
  t.match(await attemptsOf(node, res), [{ upstream: 'demo', outcome: 'timeout', httpStatus: null }]);
});

t.test('a JSON body that stalls after flowing is not retried on that target (the upstream was done and bills it) and falls back, as nothing reached the caller yet', async (t) => {
  const up = await slowJsonUpstream(t, CHAT_ANSWER, { stall: true });
  const backup = await startFakeUpstream(t);
  const node = await nodeWithFallback(t, up.url, backup.url);
  const res = await post(node, '/v1/chat/completions', chat('slow'));
  const body = (await res.json()) as { model?: string };
  t.equal(res.status, 200, JSON.stringify(body));
  t.equal(body.model, 'slow');
  t.equal(up.stalledBeforeClose, true, 'the first attempt was cut only once its body stopped coming');
  t.equal(up.requests(), 1, 'its retry (retries: 1) not spent there: it would be billed again');
  t.equal(backup.requests.length, 1);
  const attempts = await attemptsOf(node, res);
  t.match(attempts, [
    { upstream: 'demo', outcome: 'timeout', httpStatus: null },
    { upstream: 'backup', outcome: 'ok', httpStatus: 200 },
  ]);
  t.equal(attempts.length, 2);
});

t.test('a JSON body that trickles without end is cut at BODY_DEADLINE_FACTOR times timeoutMs, not held open forever', async (t) => {
  let written = 0;
  let closedAt: number | undefined;
  const raw = await startRawUpstream(t, async (socket) => {
    socket.once('close', () => (closedAt ??= performance.now()));
    socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n');
    // A newline every GAP_MS, far inside timeoutMs, until the node hangs up (bounded: 30 s).
    for (let i = 0; i < 300 && !socket.destroyed; i++) {
      socket.write(httpChunk('\n'));
      written++;
      await sleep(GAP_MS);
    }
  });
  const node = await startPipelineNode(t, {
    upstreamUrl: raw.url,
    bundle: () => ({ routes: [{ alias: 'slow', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [], timeoutMs: TIMEOUT_MS, retries: 0 }] }),
  });
  const started = performance.now();
  const res = await post(node, '/v1/chat/completions', chat('slow'));
  const body = (await res.json()) as { error?: { code?: string } };
  t.equal(res.status, 504);
  t.equal(body.error?.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
  await waitFor(() => closedAt, { what: 'the node to hang up on the upstream' });
  const took = closedAt! - started;
  t.ok(took >= BODY_DEADLINE_FACTOR * TIMEOUT_MS && took < BODY_DEADLINE_FACTOR * TIMEOUT_MS + 5_000, `hung up after ${Math.round(took)} ms`);
  t.ok(written < 300, 'before the upstream gave up on its own');
});
