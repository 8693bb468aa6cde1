// Rate limits as callers meet them through the node's Base URL (the real app and pipeline, the
// SQLite limiter an enrolled node uses): x-ratelimit-* headers on answers, 429 with Retry-After,
// and a concurrency slot freed when the request fails or the caller goes away.
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { Test } from 'tap';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { createNodeRateLimiter } from '../../../edge-node/src/rate-limit/create-node-rate-limiter.js';
import type { GuardrailRule, RateLimits } from '../../../proto/src/index.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import type { FakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';
import { policy } from '../guardrails/guardrail-fixtures.js';

/** `guardrailRules`: the key is under a policy of these rules. */
async function startLimitedNode(t: Test, keyLimits: RateLimits, guardrailRules?: GuardrailRule[]): Promise<{ origin: string; secret: string; upstream: FakeUpstream }> {
  const upstream = await startFakeUpstream(t);
  const key = newCallerKey();
  const bundle = testBundle({
    nodeId: 'node-1',
    version: 1,
    upstreamUrl: upstream.url,
    keys: [bundleKey('key-limited', key.sha256, { limits: keyLimits, guardrailPolicyId: guardrailRules === undefined ? null : 'p' })],
    guardrailPolicies: guardrailRules === undefined ? [] : [policy('p', guardrailRules)],
  });
  const logger = createLogger({ level: 'silent' });
  const limiter = await createNodeRateLimiter({ stateDir: t.testdir(), logger, env: { ZENOVA_NODE_REPLICAS: '2' } });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger, services: { limiter } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(async () => {
    await app.close();
    limiter.close();
  });
  return { origin: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, secret: key.secret, upstream };
}

function chat(origin: string, secret: string, signal?: AbortSignal): Promise<Response> {
  return fetch(`${origin}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'ping' }], max_tokens: 16 }),
    ...(signal !== undefined ? { signal } : {}),
  });
}

t.test('answers carry x-ratelimit-* headers, and the request past the limit gets 429 ZN_ERR_RATE_LIMITED with Retry-After', async (t) => {
  const { origin, secret } = await startLimitedNode(t, { requestsPerMinute: 2, tokensPerMinute: 100_000 });
  const first = await chat(origin, secret);
  t.equal(first.status, 200);
  t.equal(first.headers.get('x-ratelimit-limit-requests'), '2');
  t.equal(first.headers.get('x-ratelimit-remaining-requests'), '1');
  t.match(first.headers.get('x-ratelimit-reset-requests'), /^(\d+m)?\d+s$/);
  t.equal(first.headers.get('x-ratelimit-limit-tokens'), '100000');
  t.ok(Number(first.headers.get('x-ratelimit-remaining-tokens')) < 100_000);
  t.equal((await chat(origin, secret)).status, 200);
  const refused = await chat(origin, secret);
  t.equal(refused.status, 429);
  const body = (await refused.json()) as { error: { code: string; message: string } };
  t.equal(body.error.code, 'ZN_ERR_RATE_LIMITED');
  t.match(body.error.message, /requests per minute for this key/);
  t.ok(Number(refused.headers.get('retry-after')) >= 1, `Retry-After ${refused.headers.get('retry-after')}`);
  t.ok(refused.headers.get('x-request-id'));
});

t.test('a request whose max_tokens alone is above the tokens per minute gets 429 ZN_ERR_RATE_LIMITED at once, with x-should-retry: false and no Retry-After', async (t) => {
  const { origin, secret, upstream } = await startLimitedNode(t, { tokensPerMinute: 1_000 });
  const res = await fetch(`${origin}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'ping' }], max_completion_tokens: 100_000 }),
  });
  t.equal(res.status, 429);
  const body = (await res.json()) as { error: { code: string; type: string; message: string } };
  t.equal(body.error.code, 'ZN_ERR_RATE_LIMITED');
  t.equal(body.error.type, 'rate_limit_error');
  t.match(body.error.message, /^Request too large for the tokens per minute limit of this key: limit 1000/);
  t.equal(res.headers.get('x-should-retry'), 'false');
  t.equal(res.headers.get('retry-after'), null);
  t.equal(upstream.requests.length, 0, 'nothing was forwarded');
  t.equal((await chat(origin, secret)).status, 200, 'a request that fits is served');
});

t.test('a request too large because of n names max_tokens × n in its message and advises lowering n too', async (t) => {
  const { origin, secret, upstream } = await startLimitedNode(t, { tokensPerMinute: 1_000 });
  const res = await fetch(`${origin}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'ping' }], max_tokens: 600, n: 2 }),
  });
  t.equal(res.status, 429);
  const body = (await res.json()) as { error: { code: string; message: string } };
  t.equal(body.error.code, 'ZN_ERR_RATE_LIMITED');
  t.match(
    body.error.message,
    /^Request too large for the tokens per minute limit of this key: limit 1000, requested (\d+) \(the prompt estimate (\d+) plus max_tokens 600 × n 2\)\. Lower max_tokens or n, or shorten the input; retrying does not help\.$/,
  );
  const [, requested, prompt] = /requested (\d+) \(the prompt estimate (\d+)/.exec(body.error.message) ?? [];
  t.equal(Number(requested), Number(prompt) + 1_200, 'the parts add up to the count');
  t.equal(upstream.requests.length, 0, 'nothing was forwarded');
});

t.test('a request the key\'s guardrail policy cannot check gets its 400 however often it is sent, and spends none of requests/min', async (t) => {
  const { origin, secret, upstream } = await startLimitedNode(t, { requestsPerMinute: 2 }, [{ detector: 'email', action: 'mask', on: 'output' }]);
  const asking = (logprobs: boolean): Promise<Response> =>
    fetch(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
      body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'ping' }], max_tokens: 16, ...(logprobs ? { logprobs: true } : {}) }),
    });
  for (let i = 1; i <= 3; i += 1) {
    const res = await asking(true);
    const body = (await res.json()) as { error: { code: string; param: string | null } };
    t.equal(res.status, 400, `logprobs request ${i}`);
    t.equal(body.error.code, 'ZN_ERR_GUARDRAIL_UNCHECKABLE', `logprobs request ${i}`);
    t.equal(body.error.param, 'logprobs');
    t.equal(res.headers.get('retry-after'), null);
  }
  t.equal(upstream.requests.length, 0, 'nothing was forwarded');
  const served = await asking(false);
  t.equal(served.status, 200, 'a valid request is admitted after them');
  t.equal(served.headers.get('x-ratelimit-remaining-requests'), '1', 'the refused requests were not counted');
  t.equal((await asking(false)).status, 200, 'and so is the limit\'s second one');
});

t.test('a request that fails upstream frees its concurrency slot', async (t) => {
  const { origin, secret, upstream } = await startLimitedNode(t, { concurrentRequests: 1 });
  upstream.setBehaviour({ failNext: { count: 1, status: 500 } });
  const failed = await chat(origin, secret);
  t.ok(failed.status >= 500, `failed with ${failed.status}`);
  await failed.arrayBuffer();
  const next = await chat(origin, secret);
  t.equal(next.status, 200, 'the failed request did not keep the only slot');
});

t.test('a request in flight holds its slot, and a caller that goes away frees it', async (t) => {
  const { origin, secret, upstream } = await startLimitedNode(t, { concurrentRequests: 1 });
  upstream.setBehaviour({ hang: true });
  const gone = new AbortController();
  const inFlight = chat(origin, secret, gone.signal).catch(() => undefined);
  await waitFor(() => upstream.requests.length >= 1, { what: 'the first request to reach the upstream' });
  const refused = await chat(origin, secret);
  t.equal(refused.status, 429);
  t.equal(((await refused.json()) as { error: { code: string } }).error.code, 'ZN_ERR_CONCURRENCY_LIMITED');
  t.equal(refused.headers.get('retry-after'), '1');
  upstream.setBehaviour({});
  gone.abort();
  await inFlight;
  await waitFor(async () => (await chat(origin, secret)).status === 200, { what: 'the slot of the aborted request to be free' });
  t.pass('admitted once the caller had gone');
});
