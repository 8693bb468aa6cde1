/**
 * An admin change that leaves what is stored as it is (the same values again, or removing a key
 * that is not there) records no config version and notifies nothing, so nodes are not pushed a
 * bundle for it; it answers as a change does, with the current version. A real change to the same
 * thing still records one. Giving a key always counts as a change (the sealed form is not
 * comparable). Of two PUTs creating the same price at once, only the first records a version.
 */
import t from 'tap';
import type { Test } from 'tap';
import type { LightMyRequestResponse } from 'fastify';
import pg from 'pg';
import { CONFIG_CHANGE_LOCK_KEY } from '../../control-plane/src/config/config-changes.js';
import { testDatabase } from '../fixtures/postgres.js';
import { createTestCa } from '../fixtures/tls.js';
import { waitFor } from '../fixtures/wait-for.js';
import { configApp, expectStatus, listenConfigChanges, uniqueConfigName } from './config-harness.js';
import { migratedPool, validNodeBody } from './nodes-harness.js';

const db = await testDatabase(t);
const adminPool = await migratedPool(t, db.url);
const { call, version } = await configApp(t, db.url);
const changes = await listenConfigChanges(t, db.url);

type Body = Record<string, unknown> & { configVersion?: number };

/** Tracks one entity's requests: no-ops must leave the version, and the NOTIFYs, alone. */
async function versionWatch(t: Test): Promise<{
  noOp: (what: string, res: Promise<LightMyRequestResponse>, status?: number) => Promise<Body>;
  change: (what: string, res: Promise<LightMyRequestResponse>, status?: number) => Promise<Body>;
}> {
  let current = await version();
  // The setup's own notifications may still be in flight: take the mark once the last arrived.
  await changes.heard(current);
  let heardMark = changes.versions.length;
  return {
    noOp: async (what, res, status = 200) => {
      const body = expectStatus<Body>(await res, status);
      if (body.configVersion !== undefined) t.equal(body.configVersion, current, `${what}: answers with the current version`);
      t.equal(await version(), current, `${what}: the version did not move`);
      return body;
    },
    change: async (what, res, status = 200) => {
      const body = expectStatus<Body>(await res, status);
      const after = await version();
      t.equal(after, current + 1, `${what}: the version moved by one`);
      if (body.configVersion !== undefined) t.equal(body.configVersion, after, `${what}: answers with the new version`);
      await changes.heard(after);
      // Only this change was notified since the mark: none of the no-ops before it.
      t.same(changes.versions.slice(heardMark), [after], `${what}: the only NOTIFY since the last change`);
      current = after;
      heardMark = changes.versions.length;
      return body;
    },
  };
}

t.test('patching an upstream with what it has records no version; a real patch does', async (t) => {
  const keyless = uniqueConfigName('up');
  const keyed = uniqueConfigName('up');
  expectStatus(await call('POST', '/api/v1/upstreams', { name: keyless, kind: 'openai', baseUrl: 'https://a.example/v1', timeoutMs: 1000 }), 201);
  expectStatus(await call('POST', '/api/v1/upstreams', { name: keyed, kind: 'openai', baseUrl: 'https://a.example/v1', apiKey: 'sk-1' }), 201);
  const w = await versionWatch(t);

  const same = await w.noOp('the same timeout', call('PATCH', `/api/v1/upstreams/${keyless}`, { timeoutMs: 1000 }));
  t.match(same.upstream, { name: keyless, timeoutMs: 1000, hasApiKey: false }, 'answers with the upstream');
  await w.noOp('the same base URL and timeout', call('PATCH', `/api/v1/upstreams/${keyless}`, { baseUrl: 'https://a.example/v1', timeoutMs: 1000 }));
  await w.noOp('apiKey null on an upstream without a key', call('PATCH', `/api/v1/upstreams/${keyless}`, { apiKey: null }));
  const changed = await w.change('a new timeout', call('PATCH', `/api/v1/upstreams/${keyless}`, { timeoutMs: 2000 }));
  t.match(changed.upstream, { timeoutMs: 2000 });

  // The sealed key cannot be compared (a fresh nonce each time): giving one is always a change.
  await w.change('a key given again', call('PATCH', `/api/v1/upstreams/${keyed}`, { apiKey: 'sk-1' }));
  const removed = await w.change('apiKey null on an upstream with a key', call('PATCH', `/api/v1/upstreams/${keyed}`, { apiKey: null }));
  t.match(removed.upstream, { hasApiKey: false });
  await w.noOp('apiKey null again', call('PATCH', `/api/v1/upstreams/${keyed}`, { apiKey: null }));
  await w.noOp('a missing upstream is still a 404', call('PATCH', '/api/v1/upstreams/missing-up', { timeoutMs: 1000 }), 404);
});

t.test('setting a price a model already has records no version and keeps updatedAt', async (t) => {
  const model = uniqueConfigName('m');
  const first = expectStatus<{ price: { updatedAt: string } }>(await call('PUT', `/api/v1/prices/${model}`, { inputMicrosPerToken: 1, outputMicrosPerToken: 2 }), 200);
  const w = await versionWatch(t);

  const same = await w.noOp('the same price', call('PUT', `/api/v1/prices/${model}`, { inputMicrosPerToken: 1, outputMicrosPerToken: 2 }));
  t.same(same.price, first.price, 'answers with the stored price, updatedAt unchanged');
  await w.noOp('the same price with the default requestMicros spelled out',
    call('PUT', `/api/v1/prices/${model}`, { inputMicrosPerToken: 1, outputMicrosPerToken: 2, requestMicros: 0 }));
  const changed = await w.change('a new request price', call('PUT', `/api/v1/prices/${model}`, { inputMicrosPerToken: 1, outputMicrosPerToken: 2, requestMicros: 5 }));
  t.match(changed.price, { requestMicros: 5 });
  // Omitting requestMicros now sets it back to 0: a change.
  await w.change('requestMicros back to its default', call('PUT', `/api/v1/prices/${model}`, { inputMicrosPerToken: 1, outputMicrosPerToken: 2 }));
  await w.noOp('a new price for . is still refused', call('PUT', '/api/v1/prices/.', { inputMicrosPerToken: 1, outputMicrosPerToken: 2 }), 400);
});

t.test('patching an account with its own status or policy records no version', async (t) => {
  const account = uniqueConfigName('acct');
  const policy = uniqueConfigName('rl');
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: policy, requestsPerMinute: 60 }), 201);
  expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
  const w = await versionWatch(t);

  const same = await w.noOp('the same status', call('PATCH', `/api/v1/accounts/${account}`, { status: 'active' }));
  t.match(same.account, { name: account, status: 'active' }, 'answers with the account');
  await w.noOp('detaching a policy it does not have', call('PATCH', `/api/v1/accounts/${account}`, { rateLimitPolicy: null }));
  await w.noOp('an unknown policy is still a 400', call('PATCH', `/api/v1/accounts/${account}`, { status: 'active', rateLimitPolicy: 'nope' }), 400);
  await w.change('attaching a policy', call('PATCH', `/api/v1/accounts/${account}`, { rateLimitPolicy: policy }));
  await w.noOp('attaching it again', call('PATCH', `/api/v1/accounts/${account}`, { status: 'active', rateLimitPolicy: policy }));
  const suspended = await w.change('suspending', call('PATCH', `/api/v1/accounts/${account}`, { status: 'suspended' }));
  t.match(suspended.account, { status: 'suspended', rateLimitPolicy: policy });
});

t.test('putting a tool server as it is records no version and keeps updatedAt', async (t) => {
  const name = uniqueConfigName('tools');
  const body = { url: 'http://127.0.0.1:9/mcp', timeoutMs: 2000, callMicros: 7 };
  const first = expectStatus<{ toolServer: { updatedAt: string } }>(await call('PUT', `/api/v1/tool-servers/${name}`, body), 201);
  const w = await versionWatch(t);

  const same = await w.noOp('the same body', call('PUT', `/api/v1/tool-servers/${name}`, body));
  t.same(same.toolServer, first.toolServer, 'answers 200 with the stored server, updatedAt unchanged');
  await w.noOp('apiKey null on a server without a key', call('PUT', `/api/v1/tool-servers/${name}`, { ...body, apiKey: null }));
  await w.change('a new price per call', call('PUT', `/api/v1/tool-servers/${name}`, { ...body, callMicros: 8 }));
  // Left out, timeoutMs goes back to its default: a change.
  await w.change('timeoutMs left out', call('PUT', `/api/v1/tool-servers/${name}`, { url: body.url, callMicros: 8 }));
  await w.change('a key given', call('PUT', `/api/v1/tool-servers/${name}`, { url: body.url, callMicros: 8, apiKey: 'k' }));
  await w.change('the same key given again', call('PUT', `/api/v1/tool-servers/${name}`, { url: body.url, callMicros: 8, apiKey: 'k' }));
});

t.test('editing a node\'s settings to what it has records no version', async (t) => {
  const node = validNodeBody().name as string;
  expectStatus(await call('POST', '/api/v1/nodes', validNodeBody({ name: node, surfaces: ['model'], spoolQuotaGb: 10 })), 201);
  const w = await versionWatch(t);

  const same = await w.noOp('the same spool quota', call('PATCH', `/api/v1/nodes/${node}/settings`, { spoolQuotaGb: 10 }));
  t.match(same, { name: node, spoolQuotaGb: 10 }, 'answers with the NodeView');
  await w.noOp('the same surfaces and policy', call('PATCH', `/api/v1/nodes/${node}/settings`, { surfaces: ['model'], spoolFullPolicy: 'reject' }));
  await w.change('a new spool quota', call('PATCH', `/api/v1/nodes/${node}/settings`, { spoolQuotaGb: 20 }));
  await w.change('a new surface', call('PATCH', `/api/v1/nodes/${node}/settings`, { surfaces: ['tools', 'model'] }));
  // Surfaces are a set: listed in another order they are the same settings.
  await w.noOp('the same surfaces in another order', call('PATCH', `/api/v1/nodes/${node}/settings`, { surfaces: ['model', 'tools'] }));
});

t.test('editing a node\'s network to what it has records no version; the CA compares in its stored form', async (t) => {
  const ca = await createTestCa();
  const node = validNodeBody().name as string;
  expectStatus(await call('POST', '/api/v1/nodes', validNodeBody({
    name: node, address: 'edge.example.com', controlPlaneUrl: 'https://cp.example.com', caPem: ca.certPem,
  })), 201);
  const w = await versionWatch(t);

  const same = await w.noOp('the same address', call('PATCH', `/api/v1/nodes/${node}/network`, { address: 'edge.example.com' }));
  t.match(same, { name: node, address: 'edge.example.com', controlPlaneUrl: 'https://cp.example.com' }, 'answers with the NodeView');
  // Stored in lower case and without the trailing '/': these are the same values.
  await w.noOp('the same address in capitals and the URL with a trailing slash',
    call('PATCH', `/api/v1/nodes/${node}/network`, { address: 'EDGE.example.com', controlPlaneUrl: 'https://cp.example.com/' }));
  await w.noOp('the same CA', call('PATCH', `/api/v1/nodes/${node}/network`, { caPem: ca.certPem }));
  const crlf = `${ca.certPem.trimEnd().replace(/\n/g, '\r\n')}\r\n\r\n`;
  t.not(crlf, ca.certPem);
  await w.noOp('the same CA with CRLF line ends and a blank line after it', call('PATCH', `/api/v1/nodes/${node}/network`, { caPem: crlf }));
  const moved = await w.change('a new address', call('PATCH', `/api/v1/nodes/${node}/network`, { address: 'edge2.example.com', caPem: ca.certPem }));
  t.match(moved, { address: 'edge2.example.com' });
  await w.change('another CA', call('PATCH', `/api/v1/nodes/${node}/network`, { caPem: (await createTestCa()).certPem }));
  await w.change('the CA removed', call('PATCH', `/api/v1/nodes/${node}/network`, { caPem: null }));
  await w.noOp('the CA removed again', call('PATCH', `/api/v1/nodes/${node}/network`, { caPem: null }));
  await w.noOp('a blank CA on a node without one', call('PATCH', `/api/v1/nodes/${node}/network`, { caPem: '' }));
  await w.change('a new callback URL', call('PATCH', `/api/v1/nodes/${node}/network`, { controlPlaneUrl: 'https://cp2.example.com' }));
  await w.noOp('a missing node is still a 404', call('PATCH', '/api/v1/nodes/missing-node/network', { address: 'edge.example.com' }), 404);
});

t.test('replacing a model route with what it has records no version and keeps updatedAt', async (t) => {
  const upstream = uniqueConfigName('up');
  const other = uniqueConfigName('up');
  for (const name of [upstream, other]) {
    expectStatus(await call('POST', '/api/v1/upstreams', { name, kind: 'openai', baseUrl: 'https://a.example/v1' }), 201);
  }
  const alias = uniqueConfigName('route');
  const spec = {
    targets: [{ upstream, model: 'm1', weight: 3 }, { upstream: other, model: 'm2' }],
    fallbacks: [{ upstream: other, model: 'm3' }],
    timeoutMs: 30_000,
  };
  const first = expectStatus<{ route: { updatedAt: string } }>(await call('POST', '/api/v1/routes', { alias, ...spec }), 201);
  const w = await versionWatch(t);

  const same = await w.noOp('the same body', call('PUT', `/api/v1/routes/${alias}`, spec));
  t.same(same.route, first.route, 'answers with the stored route, updatedAt unchanged');
  await w.noOp('the same body with its defaults spelled out', call('PUT', `/api/v1/routes/${alias}`, {
    ...spec, targets: [spec.targets[0], { ...spec.targets[1], weight: 1 }], retries: 0,
  }));
  await w.noOp('an unknown upstream is still a 400',
    call('PUT', `/api/v1/routes/${alias}`, { ...spec, fallbacks: [{ upstream: 'no-such-up', model: 'm3' }] }), 400);
  // Order means something (the rotation and the fallback order): the same targets reordered are a change.
  await w.change('the targets in another order', call('PUT', `/api/v1/routes/${alias}`, { ...spec, targets: [spec.targets[1], spec.targets[0]] }));
  await w.change('timeoutMs left out (back to its default)', call('PUT', `/api/v1/routes/${alias}`, { ...spec, targets: [spec.targets[1], spec.targets[0]], timeoutMs: undefined }));
  await w.change('the fallbacks removed', call('PUT', `/api/v1/routes/${alias}`, { targets: [spec.targets[1], spec.targets[0]] }));
  await w.noOp('the fallbacks removed again', call('PUT', `/api/v1/routes/${alias}`, { targets: [spec.targets[1], spec.targets[0]], fallbacks: [] }));
  await w.noOp('a missing route is still a 404', call('PUT', '/api/v1/routes/no-such-route', spec), 404);
});

/**
 * Two PUTs of a price nobody has yet, made to overlap for sure: the test holds the config-change
 * lock until the first has inserted the row and waits for the lock, and the second waits on that
 * insert. Returns both answers and how many config versions the pair recorded.
 */
async function overlappingPricePuts(model: string, bodies: [object, object]): Promise<{ answers: LightMyRequestResponse[]; versions: number }> {
  const before = await version();
  const holder = new pg.Client({ connectionString: db.url });
  await holder.connect();
  try {
    const { rows: me } = await holder.query<{ pid: number }>('select pg_backend_pid() as pid');
    await holder.query('begin');
    await holder.query('select pg_advisory_xact_lock($1::bigint)', [CONFIG_CHANGE_LOCK_KEY]);
    const puts = bodies.map((body) => call('PUT', `/api/v1/prices/${model}`, body));
    await waitFor(async () => {
      const { rows } = await adminPool.query<{ waiting: number }>(
        `select count(*)::int as waiting from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock' and pid <> $1`,
        [me[0]!.pid],
      );
      return rows[0]!.waiting >= 2;
    }, { what: 'both PUTs waiting: one for the config-change lock, the other for the first one\'s insert' });
    await holder.query('commit');
    const answers = await Promise.all(puts);
    return { answers, versions: (await version()) - before };
  } finally {
    await holder.end();
  }
}

t.test('two concurrent PUTs creating the same price record one version', async (t) => {
  const model = uniqueConfigName('m');
  const body = { inputMicrosPerToken: 4, outputMicrosPerToken: 9 };
  const { answers, versions } = await overlappingPricePuts(model, [body, body]);
  t.equal(versions, 1, 'one version: the second PUT found the price it was setting');
  const replies = answers.map((res) => expectStatus<{ price: unknown; configVersion: number }>(res, 200));
  t.same(replies[1]!.price, replies[0]!.price, 'both answer with the same stored price');
  t.equal(replies[0]!.configVersion, replies[1]!.configVersion, 'and the same version, the one the first recorded');
  const { rows } = await adminPool.query<{ n: number }>("select count(*)::int as n from config_changes where entity = 'price' and entity_id = $1", [model]);
  t.equal(rows[0]!.n, 1, 'one price change recorded for the model');
});

t.test('two concurrent PUTs creating a price with different figures record two versions', async (t) => {
  const model = uniqueConfigName('m');
  const { answers, versions } = await overlappingPricePuts(model, [
    { inputMicrosPerToken: 4, outputMicrosPerToken: 9 },
    { inputMicrosPerToken: 5, outputMicrosPerToken: 9 },
  ]);
  t.equal(versions, 2, 'the second PUT changed the price the first set');
  const replies = answers.map((res) => expectStatus<{ configVersion: number }>(res, 200));
  t.not(replies[0]!.configVersion, replies[1]!.configVersion, 'each answers with its own version');
});
