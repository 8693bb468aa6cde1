// A node serving a signed bundle's config: keys by hash with distinct codes for revoked, expired,
// suspended-account and not-allowed-model callers; /v1/models lists only what a key may use; an
// alias goes to its first target with a weight above 0; anthropic routes are refused for now.
import t from 'tap';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { ACCOUNT_ID, UPSTREAM_SECRET, bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { startNode } from './node-harness.js';

async function call(baseURL: string, key: string | undefined, model: string): Promise<{ status: number; code: string | undefined; body: Record<string, unknown> }> {
  const res = await fetch(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key !== undefined ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
  });
  const body = (await res.json()) as Record<string, unknown>;
  return { status: res.status, code: (body.error as { code?: string } | undefined)?.code, body };
}

async function models(baseURL: string, key: string): Promise<string[]> {
  const res = await fetch(`${baseURL}/models`, { headers: { authorization: `Bearer ${key}` } });
  const body = (await res.json()) as { data: Array<{ id: string }> };
  return body.data.map((m) => m.id);
}

t.test('a bundle config authenticates keys by hash and refuses each kind of unusable key with its own code', async (t) => {
  const upstream = await startFakeUpstream(t);
  const [good, revoked, expired, restricted, suspended, orphan, unknown] = Array.from({ length: 7 }, () => newCallerKey());
  const bundle = testBundle({
    nodeId: 'node-1',
    version: 3,
    upstreamUrl: upstream.url,
    accounts: [
      { id: ACCOUNT_ID, name: 'acme', status: 'active', limits: {} },
      { id: 'acct-suspended', name: 'late-payer', status: 'suspended', limits: {} },
    ],
    keys: [
      bundleKey('k-good', good!.sha256),
      bundleKey('k-revoked', revoked!.sha256, { status: 'revoked' }),
      bundleKey('k-expired', expired!.sha256, { expiresAt: new Date(Date.now() - 60_000).toISOString() }),
      bundleKey('k-restricted', restricted!.sha256, { allowedModels: ['echo'], expiresAt: new Date(Date.now() + 3_600_000).toISOString() }),
      bundleKey('k-suspended', suspended!.sha256, { accountId: 'acct-suspended' }),
      bundleKey('k-orphan', orphan!.sha256, { accountId: 'acct-deleted' }),
    ],
  });
  const node = await startNode(t, ConfigHolder.ready(fromBundle(bundle)));

  const ok = await call(node.baseURL, good!.secret, 'echo');
  t.equal(ok.status, 200, 'an active key of an active account is served');
  t.equal(ok.body.model, 'echo');
  t.equal(upstream.requests.at(-1)?.headers.authorization, `Bearer ${UPSTREAM_SECRET}`, "the bundle's upstream secret goes upstream");

  t.match(await call(node.baseURL, revoked!.secret, 'echo'), { status: 401, code: 'ZN_ERR_API_KEY_REVOKED' });
  t.match(await call(node.baseURL, expired!.secret, 'echo'), { status: 401, code: 'ZN_ERR_API_KEY_EXPIRED' });
  t.match(await call(node.baseURL, suspended!.secret, 'echo'), { status: 403, code: 'ZN_ERR_ACCOUNT_SUSPENDED' });
  t.match(await call(node.baseURL, orphan!.secret, 'echo'), { status: 401, code: 'ZN_ERR_API_KEY_INVALID' }, 'a key whose account is gone');
  t.match(await call(node.baseURL, unknown!.secret, 'echo'), { status: 401, code: 'ZN_ERR_API_KEY_INVALID' });
  t.match(await call(node.baseURL, undefined, 'echo'), { status: 401, code: 'ZN_ERR_API_KEY_MISSING' });
  t.match(await call(node.baseURL, restricted!.secret, 'echo'), { status: 200 }, 'a restricted key on its allowed model');
  t.match(await call(node.baseURL, restricted!.secret, 'echo-2'), { status: 403, code: 'ZN_ERR_MODEL_NOT_ALLOWED' });
  t.match(await call(node.baseURL, restricted!.secret, 'no-such-alias'), { status: 403, code: 'ZN_ERR_MODEL_NOT_ALLOWED' }, 'a restricted key learns nothing about other aliases');

  t.same(await models(node.baseURL, good!.secret), ['echo', 'echo-2']);
  t.same(await models(node.baseURL, restricted!.secret), ['echo'], '/v1/models lists only the aliases the key may use');
  const single = await fetch(`${node.baseURL}/models/echo-2`, { headers: { authorization: `Bearer ${restricted!.secret}` } });
  t.equal(single.status, 403);

  const finished = node.logs().filter((l) => l.msg === 'request finished' && l.status === 200);
  t.match(finished[0], { keyId: 'k-good', accountId: ACCOUNT_ID, configVersion: 3 }, 'the log line names the key, account and config version');
  const all = node.logLines.join('\n');
  for (const key of [good, revoked, restricted]) t.notOk(all.includes(key!.secret), 'caller keys are never logged');
  t.notOk(all.includes(UPSTREAM_SECRET), 'the upstream secret is never logged');
});

t.test('an alias goes to its first target with a weight above 0, and aliases the node cannot serve are refused by name', async (t) => {
  const upstream = await startFakeUpstream(t);
  const key = newCallerKey();
  const bundle = testBundle({
    nodeId: 'node-1',
    version: 1,
    upstreamUrl: upstream.url,
    keys: [bundleKey('k', key.sha256)],
    upstreams: [
      { id: 'up-1', name: 'demo', kind: 'openai-compatible', baseUrl: upstream.url, apiKey: null, timeoutMs: 30_000 },
      { id: 'up-2', name: 'claude', kind: 'anthropic', baseUrl: 'https://api.anthropic.example/v1', apiKey: 'sk-ant-secret', timeoutMs: 30_000 },
    ],
    routes: [
      {
        alias: 'echo',
        targets: [
          { upstream: 'demo', model: 'drained-model', weight: 0 },
          { upstream: 'demo', model: 'demo-echo', weight: 5 },
        ],
        fallbacks: [],
        timeoutMs: 30_000,
        retries: 0,
      },
      { alias: 'sonnet', targets: [{ upstream: 'claude', model: 'claude-sonnet', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 },
      { alias: 'drained', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 0 }], fallbacks: [], timeoutMs: 30_000, retries: 0 },
    ],
  });
  const node = await startNode(t, ConfigHolder.ready(fromBundle(bundle)));

  t.match(await call(node.baseURL, key.secret, 'echo'), { status: 200 });
  t.equal((upstream.requests.at(-1)?.body as { model: string }).model, 'demo-echo', 'the weight-0 target was skipped');
  t.notOk(upstream.requests.at(-1)?.headers.authorization, 'an upstream without a secret gets no authorization header');
  const anthropic = await call(node.baseURL, key.secret, 'sonnet');
  t.match(anthropic, { status: 400, code: 'ZN_ERR_MODEL_WRONG_API' }, 'an Anthropic alias is served through /v1/messages, not this API');
  t.match((anthropic.body.error as { message: string }).message, /\/v1\/messages/);
  t.match(await call(node.baseURL, key.secret, 'drained'), { status: 404, code: 'ZN_ERR_MODEL_NOT_FOUND' });
  t.same(await models(node.baseURL, key.secret), ['echo'], 'only servable aliases of the OpenAI family are listed');
});

t.test('a node without a verified config answers callers 503 ZN_ERR_NODE_NOT_READY and says why on /readyz', async (t) => {
  const node = await startNode(t, ConfigHolder.notReady('no config yet: waiting for the first config from the control plane'));
  const res = await call(node.baseURL, newCallerKey().secret, 'echo');
  t.match(res, { status: 503, code: 'ZN_ERR_NODE_NOT_READY' });
  t.equal((await fetch(`${node.baseURL}/models`)).status, 503, 'also without a key: there is nothing to check it against');
  const ready = await fetch(`${node.origin}/readyz`);
  t.equal(ready.status, 503);
  t.match(await ready.json(), { ready: false, code: 'ZN_ERR_NODE_NOT_READY', reason: /waiting for the first config/, configVersion: null });
  t.equal((await fetch(`${node.origin}/healthz`)).status, 200, 'the process itself is alive');
});
