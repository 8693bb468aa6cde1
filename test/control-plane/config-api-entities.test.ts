/**
 * What the config admin API stores and shows: accounts, API keys, upstreams, model routes,
 * policies, prices and node settings round-trip with their defaults, lists and filters work, and
 * what is stored fits the signed bundle's schema.
 */
import t from 'tap';
import { bundleRouteSchema, guardrailPolicySchema, priceSchema, rateLimitSchema } from '../../proto/src/config-bundle.js';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { migratedPool, validNodeBody } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { app, call, pool } = await configApp(t, db.url);

const upstream = uniqueConfigName('up');
expectStatus(await call('POST', '/api/v1/upstreams', { name: upstream, kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1//' }), 201);

t.test('the config API needs the admin token', async (t) => {
  for (const url of ['/api/v1/config/version', '/api/v1/accounts', '/api/v1/api-keys', '/api/v1/upstreams', '/api/v1/routes', '/api/v1/prices']) {
    const res = await app.inject({ method: 'GET', url });
    t.equal(res.statusCode, 401, url);
  }
});

t.test('accounts are created active, listed by name, shown and patched', async (t) => {
  const rate = uniqueConfigName('rl');
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: rate, requestsPerMinute: 600, concurrentRequests: 8 }), 201);
  const name = uniqueConfigName('acct');
  const { account } = expectStatus<{ account: Record<string, unknown> }>(await call('POST', '/api/v1/accounts', { name }), 201);
  t.match(account, { name, status: 'active', rateLimitPolicy: null });
  t.same(expectStatus(await call('GET', `/api/v1/accounts/${name}`), 200), account);
  const patched = expectStatus<{ account: Record<string, unknown> }>(
    await call('PATCH', `/api/v1/accounts/${name}`, { status: 'suspended', rateLimitPolicy: rate }), 200);
  t.match(patched.account, { name, status: 'suspended', rateLimitPolicy: rate, id: account.id });
  const onlyStatus = expectStatus<{ account: Record<string, unknown> }>(await call('PATCH', `/api/v1/accounts/${name}`, { status: 'active' }), 200);
  t.equal(onlyStatus.account.rateLimitPolicy, rate, 'a field left out is kept');
  const { accounts } = expectStatus<{ accounts: Array<{ name: string }> }>(await call('GET', '/api/v1/accounts'), 200);
  t.ok(accounts.some((a) => a.name === name));
  t.same(accounts.map((a) => a.name), [...accounts.map((a) => a.name)].sort(), 'by name');
});

t.test('API keys keep their limits, are listed per account, and revoking keeps them listed', async (t) => {
  const a = uniqueConfigName('acct');
  const b = uniqueConfigName('acct');
  const rate = uniqueConfigName('rl');
  const guard = uniqueConfigName('gr');
  for (const name of [a, b]) expectStatus(await call('POST', '/api/v1/accounts', { name }), 201);
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: rate, tokensPerMinute: 50000 }), 201);
  expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: guard, rules: [] }), 201);
  const expiresAt = new Date(Date.now() + 86_400_000).toISOString();
  const full = expectStatus<{ apiKey: Record<string, unknown> & { id: string } }>(await call('POST', '/api/v1/api-keys', {
    account: a, name: 'full', allowedModels: ['gpt-4o', 'team/claude'], expiresAt, rateLimitPolicy: rate, guardrailPolicy: guard,
  }), 201);
  t.match(full.apiKey, { account: a, name: 'full', allowedModels: ['gpt-4o', 'team/claude'], expiresAt, rateLimitPolicy: rate, guardrailPolicy: guard, status: 'active' });
  const bare = expectStatus<{ apiKey: Record<string, unknown> }>(await call('POST', '/api/v1/api-keys', { account: b, name: 'bare', allowedModels: null }), 201);
  t.match(bare.apiKey, { allowedModels: null, expiresAt: null, rateLimitPolicy: null, guardrailPolicy: null });
  t.equal(bare.apiKey.allowedToolServers, null, 'a key created without allowedToolServers may use every tool server');

  const revoked = expectStatus<{ apiKey: Record<string, unknown> }>(await call('POST', `/api/v1/api-keys/${full.apiKey.id}/revoke`), 200);
  t.match(revoked.apiKey, { status: 'revoked', revokedAt: String });
  const listA = expectStatus<{ apiKeys: Array<{ account: string; id: string; status: string }> }>(await call('GET', `/api/v1/api-keys?account=${a}`), 200);
  t.same(listA.apiKeys.map((k) => [k.id, k.status]), [[full.apiKey.id, 'revoked']], 'only the account\'s keys, revoked ones too');
  const all = expectStatus<{ apiKeys: Array<{ account: string }> }>(await call('GET', '/api/v1/api-keys'), 200);
  t.ok(all.apiKeys.some((k) => k.account === a) && all.apiKeys.some((k) => k.account === b));
  t.same(expectStatus(await call('GET', `/api/v1/api-keys/${full.apiKey.id}`), 200), revoked.apiKey);
});

t.test("an API key's allowedToolServers are stored and shown in its view and the list; absent is null, [] is kept", async (t) => {
  const account = uniqueConfigName('acct');
  expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
  // A name no tool server has yet is accepted, as allowedModels takes aliases no route has yet.
  const restricted = expectStatus<{ apiKey: { id: string } & Record<string, unknown> }>(
    await call('POST', '/api/v1/api-keys', { account, name: 'crm-bot', allowedToolServers: ['crm-lookup', 'mail-send'] }), 201);
  t.same(restricted.apiKey.allowedToolServers, ['crm-lookup', 'mail-send'], 'in the create answer');
  t.same(expectStatus<Record<string, unknown>>(await call('GET', `/api/v1/api-keys/${restricted.apiKey.id}`), 200).allowedToolServers,
    ['crm-lookup', 'mail-send'], 'in the view');
  const none = expectStatus<{ apiKey: { id: string } & Record<string, unknown> }>(await call('POST', '/api/v1/api-keys', { account, name: 'no-tools', allowedToolServers: [] }), 201);
  t.same(none.apiKey.allowedToolServers, [], 'an empty list (no tool server) is kept, not read as null (every one)');
  const absent = expectStatus<{ apiKey: { id: string } & Record<string, unknown> }>(await call('POST', '/api/v1/api-keys', { account, name: 'all-tools' }), 201);
  t.equal(absent.apiKey.allowedToolServers, null, 'absent: every tool server');
  const { apiKeys } = expectStatus<{ apiKeys: Array<{ id: string; allowedToolServers: unknown }> }>(await call('GET', `/api/v1/api-keys?account=${account}`), 200);
  t.same(Object.fromEntries(apiKeys.map((k) => [k.id, k.allowedToolServers])), {
    [restricted.apiKey.id]: ['crm-lookup', 'mail-send'], [none.apiKey.id]: [], [absent.apiKey.id]: null,
  }, 'in the list');
});

t.test("a revoked key's deleted policies show as null in its view and the list, also once new policies take their names", async (t) => {
  const account = uniqueConfigName('acct');
  const rate = uniqueConfigName('rl');
  const guard = uniqueConfigName('gr');
  expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: rate, requestsPerMinute: 10 }), 201);
  expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: guard, rules: [{ detector: 'email', action: 'mask', on: 'both' }] }), 201);
  const { apiKey } = expectStatus<{ apiKey: { id: string } }>(
    await call('POST', '/api/v1/api-keys', { account, name: 'k', rateLimitPolicy: rate, guardrailPolicy: guard }), 201);
  expectStatus(await call('POST', `/api/v1/api-keys/${apiKey.id}/revoke`), 200);
  expectStatus(await call('DELETE', `/api/v1/rate-limit-policies/${rate}`), 200);
  expectStatus(await call('DELETE', `/api/v1/guardrail-policies/${guard}`), 200);
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: rate, requestsPerMinute: 99 }), 201);
  expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: guard, rules: [] }), 201);

  t.match(expectStatus(await call('GET', `/api/v1/api-keys/${apiKey.id}`), 200), { rateLimitPolicy: null, guardrailPolicy: null }, 'the key view');
  const { apiKeys } = expectStatus<{ apiKeys: Array<Record<string, unknown>> }>(await call('GET', `/api/v1/api-keys?account=${account}`), 200);
  t.match(apiKeys, [{ id: apiKey.id, rateLimitPolicy: null, guardrailPolicy: null }], 'the list');
});

t.test('upstreams default their timeout, drop trailing slashes, and are patched field by field', async (t) => {
  const shown = expectStatus<Record<string, unknown>>(await call('GET', `/api/v1/upstreams/${upstream}`), 200);
  t.match(shown, { name: upstream, kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1', hasApiKey: false, timeoutMs: 60000 });
  const patched = expectStatus<{ upstream: Record<string, unknown> }>(
    await call('PATCH', `/api/v1/upstreams/${upstream}`, { baseUrl: 'https://llm.internal.example/v1' }), 200);
  t.match(patched.upstream, { baseUrl: 'https://llm.internal.example/v1', timeoutMs: 60000, hasApiKey: false });
  const { upstreams } = expectStatus<{ upstreams: Array<{ name: string }> }>(await call('GET', '/api/v1/upstreams'), 200);
  t.ok(upstreams.some((u) => u.name === upstream));
});

t.test('routes take their defaults, an alias with a slash works through %2F, and PUT replaces the route', async (t) => {
  const alias = `team/${uniqueConfigName('gpt')}`;
  const path = `/api/v1/routes/${encodeURIComponent(alias)}`;
  const created = expectStatus<{ route: Record<string, unknown> & { createdAt: string } }>(
    await call('POST', '/api/v1/routes', { alias, targets: [{ upstream, model: 'gpt-4o-mini' }] }), 201);
  t.match(created.route, { alias, targets: [{ upstream, model: 'gpt-4o-mini', weight: 1 }], fallbacks: [], timeoutMs: 60000, retries: 0 });
  t.same(expectStatus(await call('GET', path), 200), created.route);

  const replaced = expectStatus<{ route: Record<string, unknown> & { updatedAt: string } }>(await call('PUT', path, {
    targets: [{ upstream, model: 'a', weight: 0 }, { upstream, model: 'b', weight: 5 }],
    fallbacks: [{ upstream, model: 'c' }],
    timeoutMs: 30000,
    retries: 2,
  }), 200);
  t.match(replaced.route, {
    alias, id: created.route.id, timeoutMs: 30000, retries: 2,
    targets: [{ upstream, model: 'a', weight: 0 }, { upstream, model: 'b', weight: 5 }], fallbacks: [{ upstream, model: 'c' }],
  });
  t.ok(Date.parse(replaced.route.updatedAt) >= Date.parse(created.route.createdAt));
  const { rows } = await pool.query<Record<string, unknown>>(
    'select alias, targets, fallbacks, timeout_ms as "timeoutMs", retries from routes where alias = $1 and deleted_at is null', [alias]);
  t.ok(bundleRouteSchema.safeParse(rows[0]).success, 'the stored route fits the bundle schema');

  const { routes } = expectStatus<{ routes: Array<{ alias: string }> }>(await call('GET', '/api/v1/routes'), 200);
  t.ok(routes.some((r) => r.alias === alias));
  t.same(expectStatus(await call('DELETE', path), 200), { deleted: alias, configVersion: (await version()) });
  t.equal((await call('GET', path)).statusCode, 404);
});

t.test('prices are set, replaced and listed in integer micro-units', async (t) => {
  const model = uniqueConfigName('gpt');
  const first = expectStatus<{ price: Record<string, unknown> }>(await call('PUT', `/api/v1/prices/${model}`, { inputMicrosPerToken: 2, outputMicrosPerToken: 8 }), 200);
  t.match(first.price, { model, inputMicrosPerToken: 2, outputMicrosPerToken: 8, requestMicros: 0 });
  const big = Number.MAX_SAFE_INTEGER;
  const second = expectStatus<{ price: Record<string, unknown> }>(
    await call('PUT', `/api/v1/prices/${model}`, { inputMicrosPerToken: 0, outputMicrosPerToken: big, requestMicros: 1500 }), 200);
  t.match(second.price, { model, inputMicrosPerToken: 0, outputMicrosPerToken: big, requestMicros: 1500 });
  const { prices } = expectStatus<{ prices: Array<Record<string, unknown> & { model: string; updatedAt: string }> }>(await call('GET', '/api/v1/prices'), 200);
  const listed = prices.find((p) => p.model === model);
  t.same(listed, second.price, 'one price per model, the latest');
  const { updatedAt: _updatedAt, ...bundlePrice } = listed!;
  t.ok(priceSchema.safeParse(bundlePrice).success, 'fits the bundle schema');
});

t.test('policies are listed with their limits and rules, in the bundle\'s shape', async (t) => {
  const rate = uniqueConfigName('rl');
  const guard = uniqueConfigName('gr');
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: rate, requestsPerMinute: 60, tokensPerMinute: 9_000_000_000, concurrentRequests: null }), 201);
  const rules = [
    { detector: 'regex', pattern: '\\bproject-x\\b', action: 'block', on: 'input' },
    { detector: 'keywords', keywords: ['secret plan', '机密'], action: 'flag', on: 'both' },
    { detector: 'prc-resident-id', action: 'mask', on: 'output' },
  ];
  expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: guard, rules }), 201);
  const rateList = expectStatus<{ policies: Array<Record<string, unknown>> }>(await call('GET', '/api/v1/rate-limit-policies'), 200);
  const stored = rateList.policies.find((p) => p.name === rate);
  t.match(stored, { requestsPerMinute: 60, tokensPerMinute: 9_000_000_000, concurrentRequests: null });
  const limits = Object.fromEntries(['requestsPerMinute', 'tokensPerMinute', 'concurrentRequests']
    .flatMap((k) => (stored?.[k] == null ? [] : [[k, stored[k]]])));
  t.ok(rateLimitSchema.safeParse(limits).success, 'its limits fit the bundle schema');
  const guardList = expectStatus<{ policies: Array<Record<string, unknown> & { id: string; name: string; rules: unknown }> }>(
    await call('GET', '/api/v1/guardrail-policies'), 200);
  const g = guardList.policies.find((p) => p.name === guard)!;
  t.same(g.rules, rules);
  t.ok(guardrailPolicySchema.safeParse({ id: g.id, name: g.name, rules: g.rules }).success, 'fits the bundle schema');
});

t.test('node settings are patched field by field and shown in the node view', async (t) => {
  const name = validNodeBody().name as string;
  expectStatus(await call('POST', '/api/v1/nodes', validNodeBody({ name })), 201);
  const before = await version();
  const view = expectStatus<Record<string, unknown>>(
    await call('PATCH', `/api/v1/nodes/${name}/settings`, { surfaces: ['tools', 'model'], spoolFullPolicy: 'metering-only' }), 200);
  t.match(view, { name, surfaces: ['model', 'tools'], spoolFullPolicy: 'metering-only', spoolQuotaGb: 10 });
  t.equal(await version(), before + 1);
  const again = expectStatus<Record<string, unknown>>(await call('PATCH', `/api/v1/nodes/${name}/settings`, { spoolQuotaGb: 250 }), 200);
  t.match(again, { surfaces: ['model', 'tools'], spoolFullPolicy: 'metering-only', spoolQuotaGb: 250 });
  t.same(expectStatus(await call('GET', `/api/v1/nodes/${name}`), 200), again);
});

async function version(): Promise<number> {
  return expectStatus<{ version: number }>(await call('GET', '/api/v1/config/version'), 200).version;
}
