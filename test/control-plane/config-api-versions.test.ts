/**
 * Every admin change to the config model through the API bumps the config version by one and
 * NOTIFYs zenova_config_changed with it; a refused change bumps nothing and notifies nothing; and
 * concurrent changes get distinct versions.
 */
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, listenConfigChanges, uniqueConfigName } from './config-harness.js';
import { migratedPool, validNodeBody } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { call, version } = await configApp(t, db.url);
const changes = await listenConfigChanges(t, db.url);

const n = {
  rate: uniqueConfigName('rl'),
  guard: uniqueConfigName('gr'),
  account: uniqueConfigName('acct'),
  upstream: uniqueConfigName('up'),
  alias: uniqueConfigName('alias'),
  node: validNodeBody().name as string,
};
let keyId = '';

interface Mutation {
  what: string;
  run(): Promise<{ status: number; body: Record<string, unknown> }>;
  /** The version from the body; node routes answer with the NodeView only. */
  bodyVersion?: false;
}

const mutation = (what: string, method: 'POST' | 'PUT' | 'PATCH' | 'DELETE', url: () => string, payload?: () => unknown, expected = 200): Mutation => ({
  what,
  run: async () => {
    const res = await call(method, url(), payload?.());
    return { status: res.statusCode, body: expectStatus<Record<string, unknown>>(res, expected) };
  },
});

const mutations: Mutation[] = [
  mutation('create a rate-limit policy', 'POST', () => '/api/v1/rate-limit-policies', () => ({ name: n.rate, requestsPerMinute: 60 }), 201),
  mutation('create a guardrail policy', 'POST', () => '/api/v1/guardrail-policies',
    () => ({ name: n.guard, rules: [{ detector: 'email', action: 'mask', on: 'both' }] }), 201),
  mutation('create an account', 'POST', () => '/api/v1/accounts', () => ({ name: n.account }), 201),
  mutation('patch an account', 'PATCH', () => `/api/v1/accounts/${n.account}`, () => ({ status: 'suspended', rateLimitPolicy: n.rate })),
  {
    what: 'create an API key',
    run: async () => {
      const res = await call('POST', '/api/v1/api-keys', { account: n.account, name: 'k1', guardrailPolicy: n.guard });
      const body = expectStatus<{ apiKey: { id: string } } & Record<string, unknown>>(res, 201);
      keyId = body.apiKey.id;
      return { status: res.statusCode, body };
    },
  },
  mutation('revoke an API key', 'POST', () => `/api/v1/api-keys/${keyId}/revoke`),
  mutation('create an upstream', 'POST', () => '/api/v1/upstreams',
    () => ({ name: n.upstream, kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1', apiKey: 'sk-test-versions' }), 201),
  mutation('patch an upstream', 'PATCH', () => `/api/v1/upstreams/${n.upstream}`, () => ({ timeoutMs: 5000 })),
  mutation('create a route', 'POST', () => '/api/v1/routes', () => ({ alias: n.alias, targets: [{ upstream: n.upstream, model: 'm' }] }), 201),
  mutation('replace a route', 'PUT', () => `/api/v1/routes/${n.alias}`, () => ({ targets: [{ upstream: n.upstream, model: 'm2', weight: 3 }] })),
  mutation('set a price', 'PUT', () => `/api/v1/prices/${n.alias}`, () => ({ inputMicrosPerToken: 1, outputMicrosPerToken: 2 })),
  mutation('delete a price', 'DELETE', () => `/api/v1/prices/${n.alias}`),
  mutation('delete a route', 'DELETE', () => `/api/v1/routes/${n.alias}`),
  mutation('delete an upstream', 'DELETE', () => `/api/v1/upstreams/${n.upstream}`),
  mutation('detach the account\'s policy', 'PATCH', () => `/api/v1/accounts/${n.account}`, () => ({ rateLimitPolicy: null })),
  mutation('delete a rate-limit policy', 'DELETE', () => `/api/v1/rate-limit-policies/${n.rate}`),
  mutation('delete a guardrail policy (its only key is revoked)', 'DELETE', () => `/api/v1/guardrail-policies/${n.guard}`),
  { ...mutation('create a node', 'POST', () => '/api/v1/nodes', () => validNodeBody({ name: n.node }), 201), bodyVersion: false },
  { ...mutation('edit a node\'s network', 'PATCH', () => `/api/v1/nodes/${n.node}/network`, () => ({ address: 'other.example.com' })), bodyVersion: false },
  { ...mutation('edit a node\'s settings', 'PATCH', () => `/api/v1/nodes/${n.node}/settings`, () => ({ spoolQuotaGb: 20 })), bodyVersion: false },
  { ...mutation('delete a node', 'DELETE', () => `/api/v1/nodes/${n.node}`), bodyVersion: false },
];

t.test('every config mutation bumps the version by one and notifies it', async (t) => {
  let previous = await version();
  for (const m of mutations) {
    const { body } = await m.run();
    const after = await version();
    t.equal(after, previous + 1, `${m.what}: version ${previous} → ${previous + 1}`);
    if (m.bodyVersion !== false) t.equal(body.configVersion, after, `${m.what}: answers with the new version`);
    await changes.heard(after);
    previous = after;
  }
});

t.test('refused mutations bump nothing and notify nothing', async (t) => {
  const account = uniqueConfigName('acct');
  const upstream = uniqueConfigName('up');
  expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
  expectStatus(await call('POST', '/api/v1/upstreams', { name: upstream, kind: 'openai', baseUrl: 'https://api.example.com/v1' }), 201);
  expectStatus(await call('POST', '/api/v1/routes', { alias: uniqueConfigName('r'), targets: [{ upstream, model: 'm' }] }), 201);
  const node = validNodeBody().name as string;
  expectStatus(await call('POST', '/api/v1/nodes', validNodeBody({ name: node })), 201);
  const before = await version();
  // The setup's own notifications may still be in flight on a loaded machine: take the mark only
  // once the last of them arrived.
  await changes.heard(before);
  const heardBefore = changes.versions.length;

  const refused: Array<[string, 'POST' | 'PUT' | 'PATCH' | 'DELETE', string, unknown, number]> = [
    ['an invalid account name', 'POST', '/api/v1/accounts', { name: 'has space' }, 400],
    ['a duplicate account', 'POST', '/api/v1/accounts', { name: account }, 409],
    ['an unknown policy on an account', 'PATCH', `/api/v1/accounts/${account}`, { rateLimitPolicy: 'nope' }, 400],
    ['patching a missing account', 'PATCH', '/api/v1/accounts/missing', { status: 'active' }, 404],
    ['a key for an unknown account', 'POST', '/api/v1/api-keys', { account: 'missing', name: 'k' }, 400],
    ['revoking a missing key', 'POST', '/api/v1/api-keys/00000000-0000-4000-8000-000000000000/revoke', undefined, 404],
    ['an upstream with a bad kind', 'POST', '/api/v1/upstreams', { name: 'x', kind: 'grpc', baseUrl: 'https://a.example' }, 400],
    ['deleting an upstream in use', 'DELETE', `/api/v1/upstreams/${upstream}`, undefined, 409],
    ['a route to an unknown upstream', 'POST', '/api/v1/routes', { alias: 'r-x', targets: [{ upstream: 'missing', model: 'm' }] }, 400],
    ['replacing a missing route', 'PUT', '/api/v1/routes/missing', { targets: [{ upstream, model: 'm' }] }, 404],
    ['a float price', 'PUT', '/api/v1/prices/m', { inputMicrosPerToken: 1.5, outputMicrosPerToken: 1 }, 400],
    ['deleting a missing price', 'DELETE', '/api/v1/prices/missing', undefined, 404],
    ['a policy without limits', 'POST', '/api/v1/rate-limit-policies', { name: 'p' }, 400],
    ['deleting a missing guardrail policy', 'DELETE', '/api/v1/guardrail-policies/missing', undefined, 404],
    ['node settings without model', 'PATCH', `/api/v1/nodes/${node}/settings`, { surfaces: ['tools'] }, 400],
    ['settings of a missing node', 'PATCH', '/api/v1/nodes/missing-node/settings', { spoolQuotaGb: 2 }, 404],
    ['a bad node network edit', 'PATCH', `/api/v1/nodes/${node}/network`, { address: 'not an address' }, 400],
    ['a duplicate node', 'POST', '/api/v1/nodes', validNodeBody({ name: node }), 409],
  ];
  for (const [what, method, url, payload, status] of refused) {
    const res = await call(method, url, payload);
    t.equal(res.statusCode, status, `${what}: ${status} (${res.body})`);
  }
  t.equal(await version(), before, 'the version did not move');
  // A later change proves the listener is live; nothing arrived in between.
  const next = expectStatus<{ configVersion: number }>(await call('POST', '/api/v1/accounts', { name: uniqueConfigName('acct') }), 201).configVersion;
  t.equal(next, before + 1);
  await changes.heard(next);
  t.same(changes.versions.slice(heardBefore), [next], 'only the successful change was notified');
});

t.test('revoking a revoked key changes nothing and answers with the current version', async (t) => {
  const account = uniqueConfigName('acct');
  expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
  const { apiKey } = expectStatus<{ apiKey: { id: string } }>(await call('POST', '/api/v1/api-keys', { account, name: 'k' }), 201);
  const first = expectStatus<{ configVersion: number }>(await call('POST', `/api/v1/api-keys/${apiKey.id}/revoke`), 200);
  const again = expectStatus<{ configVersion: number; apiKey: { status: string } }>(await call('POST', `/api/v1/api-keys/${apiKey.id}/revoke`), 200);
  t.equal(again.apiKey.status, 'revoked');
  t.equal(again.configVersion, first.configVersion);
  t.equal(await version(), first.configVersion);
});

t.test('concurrent mutations get distinct, increasing versions', async (t) => {
  const before = await version();
  const names = Array.from({ length: 10 }, () => uniqueConfigName('conc'));
  const results = await Promise.all(names.map((name) => call('POST', '/api/v1/accounts', { name })));
  const versions = results.map((res) => expectStatus<{ configVersion: number }>(res, 201).configVersion);
  t.equal(new Set(versions).size, versions.length, 'no two share a version');
  t.same([...versions].sort((a, b) => a - b), Array.from({ length: 10 }, (_, i) => before + 1 + i), 'exactly the next ten');
  t.equal(await version(), before + 10);
  for (const v of versions) await changes.heard(v);
});
