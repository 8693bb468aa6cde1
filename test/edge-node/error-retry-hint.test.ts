// Error answers tell the official SDKs whether to resend (`x-should-retry`, which both obey over
// their own rule of retrying every 5xx): `false` for codes that are not retryable, so a 502 for an
// upstream that refused the node's own key is sent once, not three times; `true` for retryable
// 429s and 5xx. The same from the pipeline and from the app's error handler, on both surfaces.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import type { Test } from 'tap';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { shouldRetryValue, zenovaError } from '../../edge-node/src/errors.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { createNodeRateLimiter } from '../../edge-node/src/rate-limit/create-node-rate-limiter.js';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import type { FakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import type { FakeUpstream } from '../fixtures/fake-upstream.js';
import { anthropicSdkError } from './anthropic-fixtures.js';
import { UPSTREAM_SECRET, bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { listenOnLoopback } from './node-harness.js';
import { sdkError } from './pipeline/pipeline-harness.js';

interface Node {
  origin: string;
  baseURL: string;
  secret: string;
  limitedSecret: string;
  openai: FakeUpstream;
  anthropic: FakeAnthropicUpstream;
}

async function startNode(t: Test): Promise<Node> {
  const openai = await startFakeUpstream(t);
  const anthropic = await startFakeAnthropicUpstream(t);
  const key = newCallerKey();
  const limited = newCallerKey();
  const bundle = testBundle({
    nodeId: 'node-1',
    version: 1,
    upstreamUrl: openai.url,
    keys: [bundleKey('key-a', key.sha256), bundleKey('key-limited', limited.sha256, { limits: { requestsPerMinute: 1 } })],
    upstreams: [
      { id: 'up-1', name: 'demo', kind: 'openai-compatible', baseUrl: openai.url, apiKey: UPSTREAM_SECRET, timeoutMs: 30_000 },
      { id: 'up-2', name: 'claude-up', kind: 'anthropic', baseUrl: anthropic.url, apiKey: 'sk-ant-upstream-secret-0123456789', timeoutMs: 30_000 },
    ],
    routes: [
      { alias: 'echo', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 },
      { alias: 'claude', targets: [{ upstream: 'claude-up', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 },
    ],
  });
  const logger = createLogger({ level: 'silent' });
  const limiter = await createNodeRateLimiter({ stateDir: undefined, logger, env: {} });
  t.teardown(() => limiter.close());
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger, services: { limiter }, maxBodyBytes: 1024 });
  const { origin, baseURL } = await listenOnLoopback(t, app);
  return { origin, baseURL, secret: key.secret, limitedSecret: limited.secret, openai, anthropic };
}

t.test("the openai client sends a chat once when the upstream refuses the node's own key: the 502 says not to retry", async (t) => {
  const node = await startNode(t);
  node.openai.setBehaviour({ failNext: { count: 3, status: 401 } });
  const client = new OpenAI({ baseURL: node.baseURL, apiKey: node.secret, maxRetries: 2, timeout: 20_000 });
  const err = await sdkError(client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'x' }] }));
  t.equal(err.status, 502);
  t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR');
  t.equal(err.headers?.get('x-should-retry'), 'false');
  t.equal(node.openai.requests.length, 1, 'one call reached the upstream');
});

t.test("the Anthropic client sends a message once when the upstream refuses the node's own key", async (t) => {
  const node = await startNode(t);
  node.anthropic.setBehaviour({ failNext: { count: 3, status: 401 } });
  const client = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 2, timeout: 20_000 });
  const err = await anthropicSdkError(client.messages.create({ model: 'claude', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }));
  t.equal(err.status, 502);
  t.equal(err.errorCode, 'ZN_ERR_UPSTREAM_ERROR');
  t.equal(err.headers?.get('x-should-retry'), 'false');
  t.equal(node.anthropic.requests.length, 1, 'one call reached the upstream');
});

t.test('a retryable upstream failure and a rate limit say x-should-retry: true', async (t) => {
  const node = await startNode(t);
  node.openai.setBehaviour({ failNext: { count: 1, status: 500 } });
  const client = new OpenAI({ baseURL: node.baseURL, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
  const failed = await sdkError(client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'x' }] }));
  t.equal(failed.status, 502);
  t.equal(failed.headers?.get('x-should-retry'), 'true');

  const limited = new OpenAI({ baseURL: node.baseURL, apiKey: node.limitedSecret, maxRetries: 0, timeout: 20_000 });
  await limited.models.list();
  const refused = await sdkError(limited.models.list());
  t.equal(refused.status, 429);
  t.equal(refused.code, 'ZN_ERR_RATE_LIMITED');
  t.equal(refused.headers?.get('x-should-retry'), 'true');
  t.ok(Number(refused.headers?.get('retry-after')) >= 1);
});

t.test('refusals from the pipeline and from the app error handler say x-should-retry: false, on both surfaces', async (t) => {
  const node = await startNode(t);
  const cases: Array<{ what: string; path: string; init: RequestInit; status: number }> = [
    { what: 'no key (pipeline)', path: '/v1/chat/completions', init: { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'x' }] }) }, status: 401 },
    { what: 'unknown model (pipeline, Anthropic)', path: '/v1/messages', init: { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': node.secret }, body: JSON.stringify({ model: 'nope', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }) }, status: 404 },
    { what: 'no route (app)', path: '/v1/nothing', init: { method: 'GET' }, status: 404 },
    { what: 'a path that does not decode (before routing)', path: '/v1/models/%E0%A4%A', init: { method: 'GET' }, status: 400 },
    { what: 'not JSON (app)', path: '/v1/chat/completions', init: { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' }, status: 400 },
    { what: 'too large (app, Anthropic)', path: '/v1/messages', init: { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ pad: 'x'.repeat(2048) }) }, status: 413 },
  ];
  for (const c of cases) {
    const res = await fetch(node.origin + c.path, c.init);
    await res.arrayBuffer();
    t.equal(res.status, c.status, c.what);
    t.equal(res.headers.get('x-should-retry'), 'false', c.what);
  }
});

t.test('the hint follows the retryable flag, and a retryable 402 leaves the SDKs to their own rule', async (t) => {
  t.equal(shouldRetryValue(zenovaError('ZN_ERR_UPSTREAM_ERROR', 'x', { status: 502, retryable: false })), 'false');
  t.equal(shouldRetryValue(zenovaError('ZN_ERR_UPSTREAM_ERROR', 'x', { status: 502, retryable: true })), 'true');
  t.equal(shouldRetryValue(zenovaError('ZN_ERR_TOOL_SESSION_CONFLICT')), 'false', 'a 502 that is not retryable');
  t.equal(shouldRetryValue(zenovaError('ZN_ERR_SPOOL_FULL')), 'true');
  t.equal(shouldRetryValue(zenovaError('ZN_ERR_INTERNAL')), 'true');
  t.equal(shouldRetryValue(zenovaError('ZN_ERR_CREDIT_EXHAUSTED')), undefined);
  t.equal(shouldRetryValue(zenovaError('ZN_ERR_MODEL_NOT_FOUND')), 'false');
});
