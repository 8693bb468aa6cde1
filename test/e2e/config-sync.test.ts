/**
 * Signed config end to end with real processes: API changes reach an online node, a node serves
 * from its cached config while the control plane is gone and catches up on reconnect, a burst of
 * versions converges, and provider secrets appear nowhere they should not.
 */
import t from 'tap';
import { join } from 'node:path';
import { testDatabase } from '../fixtures/postgres.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import {
  UPSTREAM_SECRET, callNodeDetailed, configureDemo, enrollNewNode, httpsMaterial, nodeView,
  startControlPlane, startNodeServe, tempDir,
  freePort,
} from './stack.js';


async function nodeStatusJson(t: { teardown(fn: () => unknown): void }, stateDir: string): Promise<Record<string, unknown>> {
  const { command, args } = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({ name: 'zenova-node status', command, args: [...args, 'status', '--state-dir', stateDir, '--json'], t });
  await proc.exited;
  const out = proc.output();
  return JSON.parse(out.slice(out.indexOf('{'), out.lastIndexOf('}') + 1)) as Record<string, unknown>;
}

t.test('keys created and revoked through the API take effect on an online node; a burst of 50 versions converges; secrets stay secret', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-config-');
  const https = await httpsMaterial(join(work, 'https'));
  const cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw') });
  const upstream = await startFakeUpstream(t);
  await configureDemo(cp, upstream.url);
  const stateDir = join(work, 'state');
  await enrollNewNode(t, cp, 'synced', stateDir);
  const node = await startNodeServe(t, { stateDir });
  await node.proc.waitForLine(/"msg":"config applied"/, 30_000);
  const synced = await waitFor(async () => {
    const v = (await nodeView(cp, 'synced')) as unknown as { onboardingStage: string; configVersionsBehind: number };
    return v.onboardingStage === 'config-synced' && v.configVersionsBehind === 0 ? v : undefined;
  }, { what: 'stage config-synced', timeoutMs: 15_000 });
  t.equal(synced.configVersionsBehind, 0);

  const key = (await cp.api<{ secret: string; apiKey: { id: string } }>('POST', '/api/v1/api-keys', { account: 'e2e', name: 'fresh' })).body;
  const madeAt = Date.now();
  await waitFor(async () => (await callNodeDetailed(node.url, key.secret)).status === 200, { what: 'the new key to work on the node', timeoutMs: 5_000 });
  t.comment(`new key usable after ${Date.now() - madeAt} ms`);
  t.pass('a key created through the API works on the node');

  const revoked = await cp.api('POST', `/api/v1/api-keys/${key.apiKey.id}/revoke`, {});
  t.equal(revoked.status, 200);
  const revokedAt = Date.now();
  const refused = await waitFor(async () => {
    const r = await callNodeDetailed(node.url, key.secret);
    return r.status === 401 ? r : undefined;
  }, { what: 'the revoked key to be refused', timeoutMs: 5_000 });
  t.comment(`revocation effective after ${Date.now() - revokedAt} ms`);
  t.equal(refused.code, 'ZN_ERR_API_KEY_REVOKED');

  for (let i = 0; i < 50; i++) {
    const res = await cp.api('PUT', '/api/v1/routes/echo', { targets: [{ upstream: 'fake', model: 'demo-echo' }], timeoutMs: 10_000 + i });
    if (res.status !== 200) t.fail(`route update ${i}: ${res.status}`);
  }
  const latest = (await cp.api<{ version: number }>('GET', '/api/v1/config/version')).body.version;
  const converged = await waitFor(async () => {
    const v = (await nodeView(cp, 'synced')) as unknown as { appliedConfigVersion: number; configVersionsBehind: number };
    return v.appliedConfigVersion === latest ? v : undefined;
  }, { what: `the node to apply version ${latest}`, timeoutMs: 30_000 });
  t.equal(converged.configVersionsBehind, 0, 'configVersionsBehind is 0 after the burst');

  const upstreamsBody = JSON.stringify((await cp.api('GET', '/api/v1/upstreams')).body);
  t.notOk(upstreamsBody.includes(UPSTREAM_SECRET), 'the provider secret is not in API responses');
  t.notOk(cp.proc.output().includes(UPSTREAM_SECRET), 'nor in the control plane logs');
  t.notOk(node.proc.output().includes(UPSTREAM_SECRET), 'nor in the node logs');
  t.ok(upstream.requests.some((r) => String(r.headers.authorization ?? '') === `Bearer ${UPSTREAM_SECRET}`), 'yet the node used it towards the upstream');
});

t.test('with the control plane killed a restarted node serves from its cache, says since when it is disconnected, and applies what changed on reconnect', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-offline-');
  const https = await httpsMaterial(join(work, 'https'));
  const gatewayPort = await freePort();
  const cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw'), gatewayPort });
  const upstream = await startFakeUpstream(t);
  const { apiKey } = await configureDemo(cp, upstream.url);
  const stateDir = join(work, 'state');
  await enrollNewNode(t, cp, 'offline-first', stateDir);
  const first = await startNodeServe(t, { stateDir });
  await first.proc.waitForLine(/"msg":"config applied"/, 30_000);
  await first.proc.stop();

  // While the node is away, the operator adds a key; then the control plane dies.
  const later = (await cp.api<{ secret: string }>('POST', '/api/v1/api-keys', { account: 'e2e', name: 'added-while-away' })).body.secret;
  await cp.proc.kill9();

  const node = await startNodeServe(t, { stateDir });
  t.equal((await callNodeDetailed(node.url, apiKey)).status, 200, 'serves from the cached config with the control plane gone');
  t.equal((await callNodeDetailed(node.url, later)).code, 'ZN_ERR_API_KEY_INVALID', 'the key added while away is not known yet');
  await node.proc.waitForLine(/"msg":"control session ended"|GATEWAY_UNREACHABLE/, 30_000);
  const status = await waitFor(async () => {
    const s = await nodeStatusJson(t, stateDir);
    return JSON.stringify(s).includes('disconnectedSince') ? s : undefined;
  }, { what: 'status to report the disconnection', timeoutMs: 15_000 });
  t.match(JSON.stringify(status), /"disconnectedSince":"\d{4}-/, 'status says since when it has been disconnected');
  t.match(JSON.stringify(status), /"(configVersion|version)":\d+/, 'and which config version it serves');

  await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw'), gatewayPort });
  await waitFor(async () => (await callNodeDetailed(node.url, later)).status === 200, { what: 'the change made while away to arrive', timeoutMs: 30_000 });
  t.pass('the key added while the node was away works after reconnection');
});
