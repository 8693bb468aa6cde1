/**
 * An admin change that leaves what is stored as it is (the same values again, or removing a key
 * that is not there) records no config version and notifies nothing, so nodes are not pushed a
 * bundle for it; it answers as a change does, with the current version. A real change to the same
 * thing still records one. Giving a key always counts as a change (the sealed form is not
 * comparable).
 */
import t from 'tap';
import type { Test } from 'tap';
import type { LightMyRequestResponse } from 'fastify';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, listenConfigChanges, uniqueConfigName } from './config-harness.js';
import { migratedPool, validNodeBody } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
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
