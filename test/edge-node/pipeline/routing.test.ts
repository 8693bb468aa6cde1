// Routing through the pipeline: fallback on 5xx, connect errors and timeouts; exactly retries+1
// attempts per target; a 4xx is final, but for the upstream refusing the node's key (the next target
// is tried, not the same one again); nothing is retried once the caller got a byte; weighted
// choice; each attempt bounded by its own upstream's timeout; a target that keeps failing is tried
// last until it answers again.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import t from 'tap';
import { setRouteRandomForTests } from '../../../edge-node/src/routing/route-model.js';
import { TargetHealth } from '../../../edge-node/src/routing/target-health.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { SSE_HEAD_CHUNKED, chatChunk, httpChunk, startRawUpstream } from '../../fixtures/raw-upstream.js';
import { freePort } from '../../fixtures/free-port.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { sdkError, startPipelineNode } from './pipeline-harness.js';

const ask = (model: string) => ({ model, messages: [{ role: 'user' as const, content: 'route me' }] });

t.test('routing rules', async (t) => {
  const primary = await startFakeUpstream(t);
  const backup = await startFakeUpstream(t);
  const deadUrl = `http://127.0.0.1:${await freePort()}/v1`;
  const route = (alias: string, upstream: string, extra: { fallbacks?: string[]; retries?: number; timeoutMs?: number; targets?: Array<{ upstream: string; weight: number }> } = {}) => ({
    alias,
    targets: (extra.targets ?? [{ upstream, weight: 1 }]).map((x) => ({ upstream: x.upstream, model: 'demo-echo', weight: x.weight })),
    fallbacks: (extra.fallbacks ?? []).map((name) => ({ upstream: name, model: 'demo-echo' })),
    timeoutMs: extra.timeoutMs ?? 30_000,
    retries: extra.retries ?? 0,
  });
  const node = await startPipelineNode(t, {
    upstreamUrl: primary.url,
    bundle: (base) => ({
      upstreams: [
        ...base.upstreams,
        { id: 'up-b', name: 'backup', kind: 'openai-compatible', baseUrl: backup.url, apiKey: 'sk-backup', timeoutMs: 30_000 },
        { id: 'up-d', name: 'dead', kind: 'openai-compatible', baseUrl: deadUrl, apiKey: 'sk-dead', timeoutMs: 30_000 },
      ],
      routes: [
        route('fb', 'demo', { fallbacks: ['backup'] }),
        route('retry2', 'demo', { retries: 2 }),
        route('retry1-fb', 'demo', { retries: 1, fallbacks: ['backup'] }),
        route('dead-fb', 'dead', { fallbacks: ['backup'] }),
        route('slow-fb', 'demo', { timeoutMs: 300, fallbacks: ['backup'] }),
        route('weighted', 'demo', { targets: [{ upstream: 'demo', weight: 1 }, { upstream: 'backup', weight: 3 }] }),
        route('weighted-dead', 'demo', { targets: [{ upstream: 'dead', weight: 1 }, { upstream: 'backup', weight: 1 }] }),
        route('weighted-drained', 'demo', { targets: [{ upstream: 'demo', weight: 1 }, { upstream: 'backup', weight: 0 }] }),
      ],
    }),
    // These tests pin the plan's own rules, each failing the same targets on purpose: target health
    // (which would move them last after a few failures) has its own test below.
    services: { targetHealth: new TargetHealth({ failureThreshold: Number.MAX_SAFE_INTEGER }) },
  });
  const client = node.client();
  const count = () => ({ primary: primary.requests.length, backup: backup.requests.length });
  const since = (before: { primary: number; backup: number }) => ({ primary: primary.requests.length - before.primary, backup: backup.requests.length - before.backup });
  t.afterEach(() => {
    primary.setBehaviour({});
    backup.setBehaviour({});
  });

  t.test('a 5xx from the chosen target falls back to the next one, and both attempts are recorded', async (t) => {
    primary.setBehaviour({ failNext: { count: 1, status: 503 } });
    const before = count();
    const { data, response } = await client.chat.completions.create(ask('fb')).withResponse();
    t.equal(data.model, 'fb');
    t.same(since(before), { primary: 1, backup: 1 });
    const done = node.finished.find((f) => f.requestId === response.headers.get('x-request-id'))!;
    t.match(done.attempts, [
      { upstream: 'demo', outcome: 'status', httpStatus: 503 },
      { upstream: 'backup', outcome: 'ok', httpStatus: 200 },
    ]);
    t.equal(done.outcome.status, 'ok');
  });

  t.test('a target is tried exactly retries+1 times on 5xx, then the call fails as an upstream error', async (t) => {
    primary.setBehaviour({ failNext: { count: 10, status: 500 } });
    const before = count();
    const err = await sdkError(client.chat.completions.create(ask('retry2')));
    t.equal(err.status, 502);
    t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR');
    t.same(since(before), { primary: 3, backup: 0 });
    const done = node.finished.find((f) => f.requestId === err.headers?.get('x-request-id'))!;
    t.equal(done.attempts.length, 3);
    t.same(done.outcome, { status: 'failed', httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
  });

  t.test('retries run out on one target before the fallback is tried', async (t) => {
    primary.setBehaviour({ failNext: { count: 2, status: 502 } });
    const before = count();
    await client.chat.completions.create(ask('retry1-fb'));
    t.same(since(before), { primary: 2, backup: 1 });
  });

  t.test('a 4xx from the upstream is final: no retry, no fallback, its status passed on', async (t) => {
    primary.setBehaviour({ failNext: { count: 1, status: 400 } });
    const before = count();
    const err = await sdkError(client.chat.completions.create(ask('retry1-fb')));
    t.equal(err.status, 400);
    t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR');
    t.same(since(before), { primary: 1, backup: 0 });
  });

  t.test("an upstream refusing the node's key (401, 403, 407) or redirecting (301, 308: a base URL to fix) is not retried but the fallback and the other targets are tried; the caller gets a 502", async (t) => {
    for (const status of [401, 403, 407, 301, 308]) {
      primary.setBehaviour({ failNext: { count: 10, status } });
      let before = count();
      const data = await client.chat.completions.create(ask('retry1-fb'));
      t.equal(data.model, 'retry1-fb', `${status}: the fallback answers`);
      t.same(since(before), { primary: 1, backup: 1 }, `${status}: the refusing target is not retried`);
      primary.setBehaviour({ failNext: { count: 10, status } });
      before = count();
      const err = await sdkError(client.chat.completions.create(ask('retry2')));
      t.same([err.status, err.code], [502, 'ZN_ERR_UPSTREAM_ERROR'], `${status}: without another target, a 502 (the node's credentials, not the caller's request)`);
      t.same(since(before), { primary: 1, backup: 0 }, `${status}: tried once`);
    }
  });

  t.test('an upstream 429 goes on to the next target without retrying the limited one; as the last word it is passed on with its Retry-After', async (t) => {
    primary.setBehaviour({ failNext: { count: 10, status: 429 } });
    let before = count();
    const { data, response } = await client.chat.completions.create(ask('retry1-fb')).withResponse();
    t.equal(data.model, 'retry1-fb', 'the fallback answers');
    t.same(since(before), { primary: 1, backup: 1 }, 'the limited target is not retried at once');
    const done = node.finished.find((f) => f.requestId === response.headers.get('x-request-id'))!;
    t.match(done.attempts, [{ upstream: 'demo', outcome: 'status', httpStatus: 429 }, { upstream: 'backup', outcome: 'ok' }]);
    t.equal(response.headers.get('retry-after'), null, 'an answer carries no Retry-After');
    primary.setBehaviour({ failNext: { count: 10, status: 429 } });
    before = count();
    const err = await sdkError(client.chat.completions.create(ask('retry2')));
    t.ok(err instanceof OpenAI.RateLimitError, 'without another target, the SDK sees the rate limit');
    t.equal(err.headers?.get('retry-after'), '1', 'with a Retry-After (the default 1 s: the upstream gave none)');
    t.same(since(before), { primary: 1, backup: 0 }, 'tried once, not retries+1 times');
  });

  t.test('a connect error falls back', async (t) => {
    const before = count();
    const { response } = await client.chat.completions.create(ask('dead-fb')).withResponse();
    t.same(since(before), { primary: 0, backup: 1 });
    const done = node.finished.find((f) => f.requestId === response.headers.get('x-request-id'))!;
    t.match(done.attempts, [{ upstream: 'dead', outcome: 'connect' }, { upstream: 'backup', outcome: 'ok' }]);
  });

  t.test('a reset connection is retried like a connect error', async (t) => {
    primary.setBehaviour({ resetNext: 1 });
    const before = count();
    await client.chat.completions.create(ask('retry2'));
    t.same(since(before), { primary: 2, backup: 0 });
  });

  t.test('a target that does not answer within the route timeout is abandoned for the fallback', async (t) => {
    primary.setBehaviour({ hang: true });
    const abortedBefore = primary.abortedCount();
    const before = count();
    const { response } = await client.chat.completions.create(ask('slow-fb')).withResponse();
    t.same(since(before), { primary: 1, backup: 1 });
    const done = node.finished.find((f) => f.requestId === response.headers.get('x-request-id'))!;
    t.match(done.attempts, [{ upstream: 'demo', outcome: 'timeout', httpStatus: null }, { upstream: 'backup', outcome: 'ok' }]);
    await waitFor(() => primary.abortedCount() > abortedBefore, { what: 'the timed-out upstream call to be aborted' });
  });

  t.test('once the caller got part of a stream, a broken upstream is not retried: the stream ends with an error event', async (t) => {
    primary.setBehaviour({ dropStreamAfterChunks: 3, chunkDelayMs: 10 });
    const before = count();
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
      body: JSON.stringify({ ...ask('retry1-fb'), stream: true }),
    });
    t.equal(res.status, 200);
    const text = await res.text();
    t.match(text, /^data: /, 'events arrived before the break');
    t.match(text, /event: error\ndata: \{"error":\{[^\n]*"code":"ZN_ERR_UPSTREAM_UNAVAILABLE"/);
    t.notMatch(text, /\[DONE\]/);
    t.same(since(before), { primary: 1, backup: 0 });
    const done = node.finished.find((f) => f.requestId === res.headers.get('x-request-id'))!;
    t.same(done.outcome, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_UPSTREAM_UNAVAILABLE' });
  });

  t.test('when the chosen target fails, the other targets of the alias are tried before it fails (weight 0 never)', async (t) => {
    // 0.1 of the total weight picks the dead target first.
    let restore = setRouteRandomForTests(() => 0.1);
    let before = count();
    const { response } = await client.chat.completions.create(ask('weighted-dead')).withResponse();
    t.same(since(before), { primary: 0, backup: 1 }, 'served by the other target');
    const done = node.finished.find((f) => f.requestId === response.headers.get('x-request-id'))!;
    t.match(done.attempts, [{ upstream: 'dead', outcome: 'connect' }, { upstream: 'backup', outcome: 'ok' }]);
    restore();
    restore = setRouteRandomForTests(() => 0.1);
    primary.setBehaviour({ failNext: { count: 1, status: 503 } });
    before = count();
    const failed = await client.chat.completions.create(ask('weighted-drained')).catch((err: unknown) => err);
    t.match(failed, { status: 502 }, 'the only target in rotation failed');
    t.same(since(before), { primary: 1, backup: 0 }, 'a target of weight 0 is out of rotation, also for failover');
    restore();
  });

  t.test('the weighted choice follows the weights', async (t) => {
    let restore = setRouteRandomForTests(() => 0.1);
    let before = count();
    await client.chat.completions.create(ask('weighted'));
    t.same(since(before), { primary: 1, backup: 0 }, 'the low end of the range picks the weight-1 target');
    restore();
    restore = setRouteRandomForTests(() => 0.5);
    before = count();
    await client.chat.completions.create(ask('weighted'));
    t.same(since(before), { primary: 0, backup: 1 }, 'the rest of the range belongs to the weight-3 target');
    restore();
  });
});

t.test("each attempt is bounded by its own upstream's timeout (and the route's), not by the first target's", async (t) => {
  // `hanging` never answers and has a short timeout of its own; `slow` answers after SLOW_MS, far
  // inside its own timeout and the route's. The first target's short timeout used to bound every
  // later attempt too, so the slow-but-healthy fallback was cut off and the caller got a 504.
  const HANGING_TIMEOUT_MS = 200;
  const SLOW_MS = 800;
  const hanging = await startFakeUpstream(t, { hang: true });
  const slow = await startFakeUpstream(t, { latencyMs: SLOW_MS });
  const node = await startPipelineNode(t, {
    upstreamUrl: hanging.url,
    bundle: () => ({
      upstreams: [
        { id: 'up-h', name: 'hanging', kind: 'openai-compatible', baseUrl: hanging.url, apiKey: 'sk-hanging', timeoutMs: HANGING_TIMEOUT_MS },
        { id: 'up-s', name: 'slow', kind: 'openai-compatible', baseUrl: slow.url, apiKey: 'sk-slow', timeoutMs: 30_000 },
      ],
      routes: [
        { alias: 'hang-then-fallback', targets: [{ upstream: 'hanging', model: 'demo-echo', weight: 1 }], fallbacks: [{ upstream: 'slow', model: 'demo-echo' }], timeoutMs: 60_000, retries: 0 },
        {
          alias: 'hang-then-target',
          targets: [{ upstream: 'hanging', model: 'demo-echo', weight: 1 }, { upstream: 'slow', model: 'demo-echo', weight: 1 }],
          fallbacks: [],
          timeoutMs: 60_000,
          retries: 0,
        },
      ],
    }),
    services: { targetHealth: new TargetHealth({ failureThreshold: Number.MAX_SAFE_INTEGER }) },
  });
  const client = node.client();

  t.test('a slow fallback answers after the first target timed out on its own short timeout', async (t) => {
    const slowBefore = slow.requests.length;
    const { data, response } = await client.chat.completions.create(ask('hang-then-fallback')).withResponse();
    t.equal(response.status, 200);
    t.equal(data.model, 'hang-then-fallback');
    t.equal(slow.requests.length - slowBefore, 1, 'the fallback was asked once');
    const done = node.finished.find((f) => f.requestId === response.headers.get('x-request-id'))!;
    t.match(done.attempts, [{ upstream: 'hanging', outcome: 'timeout' }, { upstream: 'slow', outcome: 'ok', httpStatus: 200 }]);
    t.ok(done.attempts[0]!.durationMs < SLOW_MS, `the hanging target was abandoned at its own ${HANGING_TIMEOUT_MS} ms (took ${done.attempts[0]!.durationMs} ms)`);
    t.ok(done.attempts[1]!.durationMs >= SLOW_MS, 'the fallback was given the time it needed');
  });

  t.test('a second weighted target with a longer timeout than the first answers after the first timed out', async (t) => {
    // 0.1 of the total weight picks the hanging target first.
    const restore = setRouteRandomForTests(() => 0.1);
    t.teardown(restore);
    const { response } = await client.chat.completions.create(ask('hang-then-target')).withResponse();
    t.equal(response.status, 200);
    const done = node.finished.find((f) => f.requestId === response.headers.get('x-request-id'))!;
    t.match(done.attempts, [{ upstream: 'hanging', outcome: 'timeout' }, { upstream: 'slow', outcome: 'ok', httpStatus: 200 }]);
  });
});

t.test('a target that keeps failing is tried last (after its fallback) until a probe finds it answering again', async (t) => {
  const primary = await startFakeUpstream(t);
  const backup = await startFakeUpstream(t);
  const ejections: Array<{ upstream: string; model: string; change: string }> = [];
  const finished: Array<{ requestId: string; attempts: Array<{ upstream: string; outcome: string }> }> = [];
  const node = await startPipelineNode(t, {
    upstreamUrl: primary.url,
    bundle: (base) => ({
      upstreams: [...base.upstreams, { id: 'up-b', name: 'backup', kind: 'openai-compatible', baseUrl: backup.url, apiKey: 'sk-backup', timeoutMs: 30_000 }],
      routes: [{ alias: 'fb', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [{ upstream: 'backup', model: 'demo-echo' }], timeoutMs: 30_000, retries: 0 }],
    }),
    services: {
      targetHealth: new TargetHealth({ failureThreshold: 2, baseCooldownMs: 300 }),
      metrics: {
        requestFinished: (ctx) => void finished.push({ requestId: ctx.requestId, attempts: ctx.attempts.map((a) => ({ upstream: a.upstream, outcome: a.outcome })) }),
        upstreamTargetHealth: (upstream, model, change) => void ejections.push({ upstream, model, change }),
      },
    },
  });
  const client = node.client();
  const attemptsOf = async () => {
    const { response } = await client.chat.completions.create(ask('fb')).withResponse();
    const id = response.headers.get('x-request-id');
    return (await waitFor(() => finished.find((f) => f.requestId === id), { what: 'the request to finish' })).attempts.map((a) => `${a.upstream}:${a.outcome}`);
  };

  primary.setBehaviour({ failNext: { count: 2, status: 503 } });
  t.same(await attemptsOf(), ['demo:status', 'backup:ok'], 'first failure: fell back');
  t.same(ejections, []);
  t.same(await attemptsOf(), ['demo:status', 'backup:ok'], 'second failure in a row');
  t.same(ejections, [{ upstream: 'demo', model: 'demo-echo', change: 'ejected' }]);
  t.match(node.logs().find((l) => l.msg === 'upstream target keeps failing; it is tried last until it answers again'), { level: 40, upstream: 'demo', model: 'demo-echo', lastError: 'ZN_ERR_UPSTREAM_ERROR' });

  // The primary answers again (its failures are used up), but it is ejected: the fallback serves
  // without the primary being asked, until the cooldown is over and one request probes it.
  const primaryBefore = primary.requests.length;
  t.same(await attemptsOf(), ['backup:ok'], 'the ejected target is not tried first');
  t.equal(primary.requests.length, primaryBefore, 'nor at all, the fallback having answered');
  const probed = await waitFor(async () => {
    const attempts = await attemptsOf();
    return attempts[0] === 'demo:ok' ? attempts : undefined;
  }, { what: 'a request to probe the primary after its cooldown', timeoutMs: 10_000 });
  t.same(probed, ['demo:ok'], 'the probe went to the primary first and it answered');
  t.same(ejections.at(-1), { upstream: 'demo', model: 'demo-echo', change: 'restored' });
  t.ok(node.logs().some((l) => l.msg === 'upstream target answers again; back in its place'));
  t.same(await attemptsOf(), ['demo:ok'], 'back in its place');
});

t.test('a stream that started before its target was ejected and ends afterwards leaves the target ejected', async (t) => {
  let endStream: () => void = () => undefined;
  const primary = await startRawUpstream(t, (socket, _request, n) => {
    if (n === 1) {
      // The long stream: its first event now, the rest when the test says.
      socket.write(SSE_HEAD_CHUNKED);
      socket.write(httpChunk(chatChunk('Hello')));
      endStream = () => {
        socket.write(httpChunk(chatChunk(null)));
        socket.write(httpChunk('data: [DONE]\n\n'));
        socket.end('0\r\n\r\n');
      };
      return;
    }
    // Every later request: reset before any answer.
    socket.resetAndDestroy();
  });
  const backup = await startFakeUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: primary.url,
    services: { targetHealth: new TargetHealth({ failureThreshold: 2, baseCooldownMs: 60_000 }) },
    bundle: (base) => ({
      upstreams: [...base.upstreams, { id: 'up-b', name: 'backup', kind: 'openai-compatible', baseUrl: backup.url, apiKey: 'sk-backup', timeoutMs: 30_000 }],
      routes: [{ alias: 'fb', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [{ upstream: 'backup', model: 'demo-echo' }], timeoutMs: 5000, retries: 0 }],
    }),
  });
  const call = (stream: boolean) => fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ ...ask('fb'), stream }),
  });
  const attemptsOf = async (res: Response) => {
    await res.text();
    const id = res.headers.get('x-request-id');
    const done = await waitFor(() => node.finished.find((f) => f.requestId === id), { what: 'the request to finish' });
    return done.attempts.map((a) => `${a.upstream}:${a.outcome}`);
  };

  const reader = (await call(true)).body!.getReader();
  await reader.read();
  t.same(await attemptsOf(await call(false)), ['demo:connect', 'backup:ok']);
  t.same(await attemptsOf(await call(false)), ['demo:connect', 'backup:ok'], 'the second failure in a row ejects it');
  endStream();
  while (!(await reader.read()).done);
  await waitFor(() => node.finished.length >= 3, { what: 'the long stream to finish' });
  t.same(await attemptsOf(await call(false)), ['backup:ok'], 'the stream that ended well started before the ejection: still last');
  t.notOk(node.logs().some((l) => l.msg === 'upstream target answers again; back in its place'));
});

t.test('a rate limit reported inside a stream or as an HTTP 429 falls back but does not eject the target; a server error inside a stream does', async (t) => {
  const backup = await startFakeUpstream(t);
  let errorChunk = { error: { code: 429, type: 'rate_limit_exceeded', message: 'slow down' } } as Record<string, unknown>;
  let httpRateLimit = false;
  const primary = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (httpRateLimit) {
        res.writeHead(429, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { type: 'requests', code: 'rate_limit_exceeded', message: 'slow down' } }));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(`data: ${JSON.stringify(errorChunk)}\n\n`);
    });
  });
  await new Promise<void>((resolve) => primary.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => primary.close(() => resolve())));
  const health = new TargetHealth({ failureThreshold: 2 });
  const node = await startPipelineNode(t, {
    upstreamUrl: `http://127.0.0.1:${(primary.address() as AddressInfo).port}/v1`,
    bundle: (base) => ({
      upstreams: [...base.upstreams, { id: 'up-b', name: 'backup', kind: 'openai-compatible', baseUrl: backup.url, apiKey: 'sk-backup', timeoutMs: 30_000 }],
      routes: [{ alias: 'fb', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [{ upstream: 'backup', model: 'demo-echo' }], timeoutMs: 30_000, retries: 0 }],
    }),
    services: { targetHealth: health },
  });
  const streamOnce = async (): Promise<string> => {
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
      body: JSON.stringify({ ...ask('fb'), stream: true }),
    });
    return `${res.status} ${await res.text()}`;
  };
  const demo = { upstream: { name: 'demo', kind: 'openai-compatible' as const, baseUrl: `http://127.0.0.1:${(primary.address() as AddressInfo).port}/v1`, apiKey: undefined, timeoutMs: 30_000 }, upstreamModel: 'demo-echo', weight: 1 };
  const backupBefore = backup.requests.length;
  for (let i = 0; i < 4; i += 1) t.match(await streamOnce(), /^200 [^]*\[DONE\]/, 'the fallback answered');
  t.equal(backup.requests.length - backupBefore, 4, 'each in-stream rate limit fell back');
  t.notOk(health.isEjected(demo), 'a rate limit is no failure of the target');
  httpRateLimit = true;
  for (let i = 0; i < 4; i += 1) t.match(await streamOnce(), /^200 [^]*\[DONE\]/, 'the fallback answered an HTTP 429');
  t.equal(backup.requests.length - backupBefore, 8, 'each HTTP 429 fell back');
  t.notOk(health.isEjected(demo), 'an HTTP 429 is no failure of the target either');
  httpRateLimit = false;
  errorChunk = { error: { code: 500, type: 'server_error', message: 'boom' } };
  await streamOnce();
  await streamOnce();
  t.ok(health.isEjected(demo), 'two in-stream server errors in a row eject it');
});
