/**
 * A control plane whose database is restored from a backup counts config versions again from the
 * backup's number, below the version its nodes applied; nodes refuse versions older than theirs.
 * The node's hello reports its version (and its highest applied, and the served config's content
 * hash), and the control plane moves its versions past it, so a change made after the restore
 * (here: a key revoked) reaches the node at once — also when the versions made after the restore
 * have caught up with the node's, and when the node serves no config but keeps its mark.
 *
 * The restore is simulated on `config_changes` alone (the rows after the backup's version deleted,
 * the sequence set back), while the control plane is stopped, as an operator's restore would be.
 */
import t, { type Test } from 'tap';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import { testDatabase } from '../fixtures/postgres.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { callNodeDetailed, configureDemo, enrollNewNode, httpsMaterial, nodeView, startControlPlane, startNodeServe, tempDir, type ControlPlane } from './stack.js';

async function sql<T extends pg.QueryResultRow>(url: string, text: string, values: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(text, values)).rows;
  } finally {
    await client.end();
  }
}

t.test('after a database restore, a change made on the control plane reaches a node that had applied a newer config version', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-restore-');
  const https = await httpsMaterial(join(work, 'https'));
  const cpOpts = { db, https, gatewayTlsDir: join(work, 'gw') };
  let cp = await startControlPlane(t, cpOpts);
  const upstream = await startFakeUpstream(t);
  const backupVersion = Number((await sql<{ v: string }>(db.url, 'select max(version)::text as v from config_changes'))[0]!.v);
  // Changes made after the backup was taken: the node applies them.
  const { apiKey } = await configureDemo(cp, upstream.url);
  const extra = (await cp.api<{ secret: string; apiKey: { id: string } }>('POST', '/api/v1/api-keys', { account: 'e2e', name: 'made-after-backup' })).body;
  const stateDir = join(work, 'state');
  await enrollNewNode(t, cp, 'restored', stateDir);
  const node = await startNodeServe(t, { stateDir });
  const applied = await waitFor(async () => {
    const v = (await nodeView(cp, 'restored')) as unknown as { configVersionsBehind: number; onboardingStage: string };
    const latest = Number((await sql<{ v: string }>(db.url, 'select max(version)::text as v from config_changes'))[0]!.v);
    return v.onboardingStage === 'config-synced' && v.configVersionsBehind === 0 ? latest : undefined;
  }, { what: 'the node config-synced', timeoutMs: 30_000 });
  t.equal((await callNodeDetailed(node.url, extra.secret)).status, 200, 'the key works on the node');
  t.ok(applied > backupVersion + 2, `the node applied version ${applied}, the backup holds ${backupVersion}`);

  // The restore: versions count again from the backup's.
  const url = new URL(cp.url);
  const gatewayPort = cp.gatewayPort;
  await cp.proc.stop();
  await sql(db.url, 'delete from config_changes where version > $1', [backupVersion]);
  await sql(db.url, "select setval(pg_get_serial_sequence('config_changes', 'version'), $1::bigint)", [backupVersion]);
  cp = await startControlPlane(t, { ...cpOpts, listenPort: Number(url.port), gatewayPort });

  // After the restore, the operator revokes the key; its version is the backup's + 1.
  t.equal((await cp.api('POST', `/api/v1/api-keys/${extra.apiKey.id}/revoke`, {})).status, 200);
  const refused = await waitFor(async () => {
    const r = await callNodeDetailed(node.url, extra.secret);
    return r.status === 401 ? r : undefined;
  }, { what: 'the key revoked after the restore to be refused by the node', timeoutMs: 30_000 });
  t.equal(refused.code, 'ZN_ERR_API_KEY_REVOKED');
  const latest = Number((await sql<{ v: string }>(db.url, 'select max(version)::text as v from config_changes'))[0]!.v);
  t.ok(latest > applied, `the versions moved on past the node's ${applied} (now ${latest})`);
  t.equal((await callNodeDetailed(node.url, apiKey)).status, 200, 'the node serves the current config');
  await cp.proc.waitForLine(/config versions continue past it/, 30_000);
  t.pass('the control plane logged why the versions moved on');
});

const latestVersion = async (url: string): Promise<number> => Number((await sql<{ v: string }>(url, 'select max(version)::text as v from config_changes'))[0]!.v);

/**
 * A control plane with changes made after its backup, one node synced to them and then stopped
 * (a branch link down, the node host rebooting) across the restore, and the restore itself.
 */
async function syncedNodeThenRestore(t: Test, prefix: string) {
  const db = await testDatabase(t);
  const work = tempDir(t, prefix);
  const https = await httpsMaterial(join(work, 'https'));
  const cpOpts = { db, https, gatewayTlsDir: join(work, 'gw') };
  const first = await startControlPlane(t, cpOpts);
  const upstream = await startFakeUpstream(t);
  const backupVersion = await latestVersion(db.url);
  const { apiKey } = await configureDemo(first, upstream.url);
  const extra = (await first.api<{ secret: string; apiKey: { id: string } }>('POST', '/api/v1/api-keys', { account: 'e2e', name: 'made-after-backup' })).body;
  const stateDir = join(work, 'state');
  await enrollNewNode(t, first, 'restored', stateDir);
  const node = await startNodeServe(t, { stateDir });
  const applied = await waitFor(async () => {
    const v = await nodeView(first, 'restored');
    const latest = await latestVersion(db.url);
    return v.onboardingStage === 'config-synced' && v.configVersionsBehind === 0 ? latest : undefined;
  }, { what: 'the node config-synced', timeoutMs: 30_000 });
  t.equal((await callNodeDetailed(node.url, extra.secret)).status, 200, 'the key works on the node');
  await node.proc.stop();

  const url = new URL(first.url);
  const gatewayPort = first.gatewayPort;
  await first.proc.stop();
  await sql(db.url, 'delete from config_changes where version > $1', [backupVersion]);
  await sql(db.url, "select setval(pg_get_serial_sequence('config_changes', 'version'), $1::bigint)", [backupVersion]);
  const cp: ControlPlane = await startControlPlane(t, { ...cpOpts, listenPort: Number(url.port), gatewayPort });
  return { db, cp, stateDir, apiKey, extra, applied };
}

async function revokedOnTheNode(nodeUrl: string, secret: string): Promise<{ status: number; code?: string }> {
  return waitFor(async () => {
    const r = await callNodeDetailed(nodeUrl, secret);
    return r.status === 401 ? r : undefined;
  }, { what: 'the key revoked after the restore to be refused by the node', timeoutMs: 30_000 });
}

t.test('after a restore whose new versions caught up with the node\'s, a node on that same version with another config is moved on and takes the current one', async (t) => {
  const { db, cp, stateDir, apiKey, extra, applied } = await syncedNodeThenRestore(t, 'zn-e2e-restore-equal-');
  // After the restore the key is revoked, and ordinary changes bring the versions to the node's.
  t.equal((await cp.api('POST', `/api/v1/api-keys/${extra.apiKey.id}/revoke`, {})).status, 200);
  for (let i = 0; (await latestVersion(db.url)) < applied; i++) {
    t.equal((await cp.api('POST', '/api/v1/api-keys', { account: 'e2e', name: `later-${i}` })).status, 201);
  }
  t.equal(await latestVersion(db.url), applied, 'the control plane\'s newest version is the one the node applied, with other content');

  const node = await startNodeServe(t, { stateDir });
  t.equal((await revokedOnTheNode(node.url, extra.secret)).code, 'ZN_ERR_API_KEY_REVOKED');
  t.equal((await callNodeDetailed(node.url, apiKey)).status, 200, 'the node serves the current config');
  const latest = await latestVersion(db.url);
  t.ok(latest > applied, `the versions moved on past the node's ${applied} (now ${latest})`);
  const view = await waitFor(async () => {
    const v = await nodeView(cp, 'restored');
    return v.appliedConfigVersion === latest ? v : undefined;
  }, { what: 'the node to report the new version applied', timeoutMs: 30_000 });
  t.equal(view.configVersionsBehind, 0);
  await cp.proc.waitForLine(/serves another config under this control plane's newest version/, 30_000);
  t.pass('the control plane logged why the versions moved on');
});

t.test('after a restore, a node that serves no config but had applied a newer version gets one past it and is ready again', async (t) => {
  const { db, cp, stateDir, apiKey, extra, applied } = await syncedNodeThenRestore(t, 'zn-e2e-restore-notready-');
  // The node's current.json is lost (an operator "resetting" the cache), its mark kept: it refuses
  // any version below the mark and serves nothing meanwhile.
  await rm(join(stateDir, 'config', 'current.json'));
  t.equal((await cp.api('POST', `/api/v1/api-keys/${extra.apiKey.id}/revoke`, {})).status, 200);
  t.ok((await latestVersion(db.url)) < applied, 'the control plane\'s newest version is below the node\'s mark');

  const node = await startNodeServe(t, { stateDir });
  const readyz = node.url.replace(/\/v1$/, '') + '/readyz';
  await waitFor(async () => ((await fetch(readyz)).status === 200 ? true : undefined), { what: 'the node to be ready', timeoutMs: 30_000 });
  t.equal((await revokedOnTheNode(node.url, extra.secret)).code, 'ZN_ERR_API_KEY_REVOKED');
  t.equal((await callNodeDetailed(node.url, apiKey)).status, 200, 'the node serves the current config');
  const latest = await latestVersion(db.url);
  t.ok(latest > applied, `the versions moved on past the node's mark ${applied} (now ${latest})`);
  const view = await nodeView(cp, 'restored');
  t.equal(view.configError, null, 'no push was refused as older');
});
