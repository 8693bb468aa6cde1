/**
 * The nodes admin API against real PostgreSQL: create with the one-time install command, list,
 * show, edit network (answering with the figures after its config version), delete (with its
 * NOTIFY), command reissue, and the NodeView's status, figures and onboarding stage.
 */
import { createHash } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import t from 'tap';
import { latestConfigVersion } from '../../control-plane/src/config/config-changes.js';
import { recordConfigApplied } from '../../control-plane/src/gateway/node-status.js';
import { verifyCredential } from '../../control-plane/src/nodes/credentials.js';
import { createTestCa } from '../fixtures/tls.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bearer, createNode, enroll, issue, listenNodeEvents, migratedPool, nodesApp, uniqueName } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const OFFLINE_AFTER_MS = 60_000;
const { app, settings } = await nodesApp(t, db.url, { nodes: { offlineAfterMs: OFFLINE_AFTER_MS } });
const ca = await createTestCa();
/** The CA as stored and returned: the certificates, each line ending in \n. */
const caStored = `${ca.certPem.trim()}\n`;

const TOKEN = /^zn_it_[A-Za-z0-9_-]{43}$/;
const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

interface View { [key: string]: unknown; id: string; name: string }

async function show(name: string): Promise<{ status: number; body: View }> {
  const res = await app.inject({ method: 'GET', url: `/api/v1/nodes/${name}`, headers: bearer });
  return { status: res.statusCode, body: res.json<View>() };
}

t.test('creating a node answers 201 with its view and an install command in the seed\'s form, the token piped in', async (t) => {
  const name = uniqueName();
  const res = await app.inject({
    method: 'POST', url: '/api/v1/nodes', headers: bearer,
    payload: { name, region: 'east', surfaces: ['model', 'tools'], address: 'edge.example.com:8443', controlPlaneUrl: 'https://cp.example.com/' },
  });
  t.equal(res.statusCode, 201);
  const { node, install } = res.json<{ node: View; install: { command: string; token: string; expiresAt: string; kind: string; caPem: unknown } }>();
  t.match(install.token, TOKEN, 'zn_it_ + 32 random bytes in base64url');
  t.equal(install.command, `printf '%s\\n' ${install.token} | sudo ./zenova install node --package zenova-node.zpkg --control-plane https://cp.example.com --token-file -`);
  t.equal(install.kind, 'install');
  t.equal(install.caPem, null);
  t.equal(Date.parse(install.expiresAt) - Date.parse(node.createdAt as string), settings.nodes.installTokenTtlMs, 'valid for the TTL');
  t.match(node, {
    name, region: 'east', surfaces: ['model', 'tools'], installDir: null, address: 'edge.example.com:8443',
    controlPlaneUrl: 'https://cp.example.com', hasCa: false, spoolQuotaGb: 10, spoolFullPolicy: 'reject', replicas: 1,
    status: 'pending', version: null, protocolVersion: null, configVersionsBehind: null, lastHeartbeatAt: null,
    requests5m: null, errorRate5m: null, backfillBacklog: null, spoolBytes: null, onboardingStage: null, hostname: null, arch: null,
    enrolledAt: null,
  });
  t.match(node.id, /^[0-9a-f-]{36}$/);
  t.notOk('caPem' in node, 'the view says hasCa, it does not carry the CA');
  t.same((await show(name)).body, node, 'GET shows the same view');
});

t.test('the command adds --ca-file and --install-dir when the node has them, and returns the CA to save', async (t) => {
  const created = await createNode(app, { caPem: ca.certPem, installDir: '/data/zenova-node' });
  const { token } = created.install;
  t.equal(created.install.command,
    `printf '%s\\n' ${token} | sudo ./zenova install node --package zenova-node.zpkg --control-plane https://cp.example.com --token-file - ` +
    '--ca-file zenova-control-plane-ca.pem --install-dir /data/zenova-node');
  t.equal(created.install.caPem, caStored);
  t.equal(created.node.hasCa, true);
});

t.test('reenroll and upgrade commands have their §9.6 forms; upgrade never carries --install-dir', async (t) => {
  const { node } = await createNode(app, { caPem: ca.certPem, installDir: '/data/zenova-node' });
  const reenroll = (await issue(app, node.name, 'reenroll')).json<{ command: string; token: string; kind: string }>();
  t.equal(reenroll.kind, 'reenroll');
  t.equal(reenroll.command,
    `printf '%s\\n' ${reenroll.token} | sudo ./zenova install node --package zenova-node.zpkg --reenroll --control-plane https://cp.example.com --token-file - ` +
    '--ca-file zenova-control-plane-ca.pem --install-dir /data/zenova-node');
  const upgrade = (await issue(app, node.name, 'upgrade')).json<{ command: string; token: string; kind: string }>();
  t.equal(upgrade.kind, 'upgrade');
  t.equal(upgrade.command,
    `printf '%s\\n' ${upgrade.token} | sudo ./zenova install node --package zenova-node.zpkg --control-plane https://cp.example.com --token-file - ` +
    '--ca-file zenova-control-plane-ca.pem --upgrade');
  const install = (await issue(app, node.name, 'install')).json<{ command: string; token: string; kind: string }>();
  t.equal(install.kind, 'install');
  t.match(install.command, new RegExp(`^printf '%s\\\\n' ${escape(install.token)} \\| sudo .* --token-file - --ca-file`));
  const plain = await createNode(app);
  const plainUpgrade = (await issue(app, plain.node.name, 'upgrade')).json<{ command: string; token: string }>();
  t.equal(plainUpgrade.command,
    `printf '%s\\n' ${plainUpgrade.token} | sudo ./zenova install node --package zenova-node.zpkg --control-plane https://cp.example.com --token-file - --upgrade`);
  t.equal((await issue(app, 'no-such-node', 'install')).statusCode, 404);
});

t.test('install tokens are stored only as their SHA-256: the token text is nowhere in the database', async (t) => {
  const created = await createNode(app);
  const { token } = created.install;
  const reenroll = (await issue(app, created.node.name, 'reenroll')).json<{ token: string }>().token;
  const { rows: tables } = await pool.query<{ name: string }>(
    `select quote_ident(table_name) as name from information_schema.tables where table_schema = 'public' and table_type = 'BASE TABLE'`);
  t.ok(tables.some((r) => r.name === 'install_tokens'));
  for (const { name } of tables) {
    const { rows } = await pool.query<{ row: string }>(`select row_to_json(x)::text as row from ${name} x`);
    for (const { row } of rows) {
      for (const secret of [token, reenroll]) {
        const body = secret.slice('zn_it_'.length);
        t.notOk(row.includes(body) || row.includes(Buffer.from(secret).toString('hex')), `${name}: no token text`);
      }
    }
  }
  const { rows } = await pool.query<{ kind: string; token_hash: Buffer }>(
    'select kind, token_hash from install_tokens where node_id = $1 order by created_at, kind', [created.node.id]);
  const hashes = new Map(rows.map((r) => [r.kind, r.token_hash.toString('hex')]));
  t.equal(hashes.get('install'), createHash('sha256').update(token).digest('hex'));
  t.equal(hashes.get('reenroll'), createHash('sha256').update(reenroll).digest('hex'));
});

t.test('reissuing a command invalidates the previous unused token of that kind, not the others', async (t) => {
  const created = await createNode(app);
  const reenroll = (await issue(app, created.node.name, 'reenroll')).json<{ token: string }>().token;
  const second = (await issue(app, created.node.name, 'install')).json<{ token: string }>().token;
  t.not(second, created.install.token);
  const { rows } = await pool.query<{ kind: string; open: boolean }>(
    'select kind, (used_at is null and invalidated_at is null) as open from install_tokens where node_id = $1 order by created_at',
    [created.node.id]);
  t.same(rows, [{ kind: 'install', open: false }, { kind: 'reenroll', open: true }, { kind: 'install', open: true }]);
  const old = await enroll(app, created.install.token);
  t.equal(old.statusCode, 401, 'the replaced token no longer enrolls');
  t.match(old.json(), { error: { code: 'ZN_ERR_CP_TOKEN_SUPERSEDED', type: 'authentication_error', message: /^The token was replaced by a newer command issued at \d{4}-\d\d-\d\dT[\d:.]+Z; run the newest command\.$/ } });
  t.equal((await enroll(app, second)).statusCode, 200, 'the new one does');
  t.equal((await enroll(app, reenroll, { mode: 'reenroll' })).statusCode, 200, 'the reenroll token of the other kind still works');
});

t.test('node names are unique among live nodes and can be used again after a delete', async (t) => {
  const name = uniqueName();
  await createNode(app, { name });
  const again = await app.inject({
    method: 'POST', url: '/api/v1/nodes', headers: bearer,
    payload: { name, surfaces: ['model'], address: 'other.example.com', controlPlaneUrl: 'https://cp.example.com' },
  });
  t.equal(again.statusCode, 409);
  t.match(again.json(), { error: { code: 'ZN_ERR_CP_NODE_NAME_TAKEN', type: 'conflict_error', message: new RegExp(`^name: a node named '${name}' already exists`) } });
  t.equal((await app.inject({ method: 'DELETE', url: `/api/v1/nodes/${name}`, headers: bearer })).statusCode, 200);
  const reused = await createNode(app, { name });
  t.equal(reused.node.name, name, 'the name of a deleted node is free');
});

t.test('list shows live nodes by name; show of an unknown or deleted node is 404 NODE_NOT_FOUND', async (t) => {
  const a = await createNode(app, { name: uniqueName('list-b') });
  const b = await createNode(app, { name: uniqueName('list-a') });
  const gone = await createNode(app, { name: uniqueName('list-c') });
  await app.inject({ method: 'DELETE', url: `/api/v1/nodes/${gone.node.name}`, headers: bearer });
  const res = await app.inject({ method: 'GET', url: '/api/v1/nodes', headers: bearer });
  t.equal(res.statusCode, 200);
  const names = res.json<{ nodes: View[] }>().nodes.map((n) => n.name);
  t.ok(names.includes(a.node.name) && names.includes(b.node.name));
  t.notOk(names.includes(gone.node.name), 'deleted nodes are not listed');
  t.same(names, [...names].sort(), 'sorted by name');
  for (const name of ['no-such-node', gone.node.name]) {
    const missing = await show(name);
    t.equal(missing.status, 404);
    t.match(missing.body, { error: { code: 'ZN_ERR_CP_NODE_NOT_FOUND', message: `No node named '${name}'.` } });
  }
});

t.test('editing the network changes address, callback URL and CA; the name cannot be changed', async (t) => {
  const { node } = await createNode(app);
  const patch = (payload: unknown): Promise<LightMyRequestResponse> =>
    app.inject({ method: 'PATCH', url: `/api/v1/nodes/${node.name}/network`, headers: bearer, payload: payload as object });
  const withCa = await patch({ address: 'new.example.com:9443', controlPlaneUrl: 'https://cp2.example.com', caPem: ca.certPem });
  t.equal(withCa.statusCode, 200);
  t.match(withCa.json(), { name: node.name, address: 'new.example.com:9443', controlPlaneUrl: 'https://cp2.example.com', hasCa: true });
  const command = (await issue(app, node.name, 'install')).json<{ command: string; caPem: string }>();
  t.match(command.command, /--control-plane https:\/\/cp2\.example\.com .* --ca-file zenova-control-plane-ca\.pem$/, 'new commands use the new network');
  t.equal(command.caPem, caStored);
  const addressOnly = await patch({ address: 'third.example.com' });
  t.match(addressOnly.json(), { address: 'third.example.com', controlPlaneUrl: 'https://cp2.example.com', hasCa: true }, 'other fields kept');
  t.match((await patch({ caPem: null })).json(), { hasCa: false }, 'null removes the CA');
  const renamed = await patch({ name: 'renamed' });
  t.equal(renamed.statusCode, 400);
  t.match(renamed.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: 'name: unknown field' } });
  t.match((await patch({})).json(), { error: { message: 'body: must change at least one of address, controlPlaneUrl, caPem' } });
  t.match((await patch({ controlPlaneUrl: 'http://cp' })).json(), { error: { message: 'controlPlaneUrl: must start with https://' } });
  t.match((await patch({ caPem: 'junk' })).json(), { error: { message: /^caPem: must be one or more PEM certificates/ } });
  const missing = await app.inject({ method: 'PATCH', url: '/api/v1/nodes/no-such-node/network', headers: bearer, payload: { address: 'x.example.com' } });
  t.equal(missing.statusCode, 404);
});

t.test('a network or settings edit answers with the figures after its config version: a node that was in step is then behind by it', async (t) => {
  const created = await createNode(app);
  const name = created.node.name;
  const { nodeId } = (await enroll(app, created.install.token)).json<{ nodeId: string }>();
  t.ok(await recordConfigApplied(pool, nodeId, await latestConfigVersion(pool)), 'the node applied the latest version');
  t.equal((await show(name)).body.configVersionsBehind, 0, 'in step before the edits');
  const edit = async (part: 'network' | 'settings', payload: object): Promise<View> => {
    const res = await app.inject({ method: 'PATCH', url: `/api/v1/nodes/${name}/${part}`, headers: bearer, payload });
    t.equal(res.statusCode, 200, `${part}: ${res.body}`);
    return res.json<View>();
  };
  const network = await edit('network', { address: 'moved.example.com' });
  t.equal(network.configVersionsBehind, 1, 'the network edit is a version the node has not applied');
  t.same(network, (await show(name)).body, 'the network answer is what a GET right after shows');
  const settings = await edit('settings', { spoolQuotaGb: 11 });
  t.equal(settings.configVersionsBehind, 2);
  t.same(settings, (await show(name)).body, 'the settings answer is what a GET right after shows');
});

t.test('deleting a node revokes its credentials, invalidates its tokens and sends NOTIFY node-deleted', async (t) => {
  const listener = await listenNodeEvents(t, db.url);
  const created = await createNode(app);
  const enrolled = (await enroll(app, created.install.token)).json<{ nodeId: string; credential: { secret: string } }>();
  t.equal((await verifyCredential(pool, enrolled.nodeId, enrolled.credential.secret)).ok, true, 'the credential works before');
  await issue(app, created.node.name, 'reenroll');
  const res = await app.inject({ method: 'DELETE', url: `/api/v1/nodes/${created.node.name}`, headers: bearer });
  t.equal(res.statusCode, 200);
  t.same(res.json(), { deleted: created.node.name });
  const event = await waitFor(() => listener.events.find((e) => e.nodeId === created.node.id),
    { what: 'the node-deleted notification', timeoutMs: 10_000 });
  t.same(event, { type: 'node-deleted', nodeId: created.node.id });
  const check = await verifyCredential(pool, enrolled.nodeId, enrolled.credential.secret);
  t.match(check, { ok: false, code: 'NODE_DELETED' });
  const { rows } = await pool.query<{ revoked: boolean }>('select revoked_at is not null as revoked from node_credentials where node_id = $1', [created.node.id]);
  t.ok(rows.length > 0 && rows.every((r) => r.revoked), 'every credential is revoked');
  const { rows: open } = await pool.query('select 1 from install_tokens where node_id = $1 and used_at is null and invalidated_at is null', [created.node.id]);
  t.equal(open.length, 0, 'no token stays open');
  t.equal((await show(created.node.name)).status, 404);
  const again = await app.inject({ method: 'DELETE', url: `/api/v1/nodes/${created.node.name}`, headers: bearer });
  t.equal(again.statusCode, 404, 'deleting twice is 404');
});

t.test('the central node office-primary cannot be deleted: 409 NODE_CENTRAL, its credential still valid', async (t) => {
  const created = await createNode(app, { name: 'office-primary' });
  const enrolled = (await enroll(app, created.install.token)).json<{ nodeId: string; credential: { secret: string } }>();
  const res = await app.inject({ method: 'DELETE', url: '/api/v1/nodes/office-primary', headers: bearer });
  t.equal(res.statusCode, 409);
  t.equal(res.json().error.code, 'ZN_ERR_CP_NODE_CENTRAL');
  t.match(res.json().error.message, /office-primary is the central node, installed with the control plane/);
  t.equal((await verifyCredential(pool, enrolled.nodeId, enrolled.credential.secret)).ok, true, 'its credential still works');
  t.equal((await show('office-primary')).status, 200, 'it is still listed');
});

t.test('status is pending before the first heartbeat, online while heartbeats are recent, offline after offlineAfterMs', async (t) => {
  const { node } = await createNode(app);
  t.equal((await show(node.name)).body.status, 'pending');
  // The gateway writes last_heartbeat_at; here the test plays the gateway.
  await pool.query('update nodes set last_heartbeat_at = now() where id = $1', [node.id]);
  const online = (await show(node.name)).body;
  t.equal(online.status, 'online');
  t.match(online.lastHeartbeatAt, /^\d{4}-\d\d-\d\dT/, 'lastHeartbeatAt is an ISO time');
  await pool.query('update nodes set last_heartbeat_at = now() - make_interval(secs => $2) where id = $1', [node.id, OFFLINE_AFTER_MS / 1000 + 5]);
  t.equal((await show(node.name)).body.status, 'offline', `offline ${OFFLINE_AFTER_MS} ms after the last heartbeat`);
  const { rows } = await pool.query<{ at: Date }>('select last_heartbeat_at as at from nodes where id = $1', [node.id]);
  t.equal((await show(node.name)).body.lastHeartbeatAt, rows[0]!.at.toISOString());
});

t.test('figures: 5-minute requests, error rate rounded to 4 places (0 without requests), backlog and spool bytes', async (t) => {
  const { node } = await createNode(app);
  // The gateway writes both on a heartbeat; here the test plays the gateway.
  await pool.query(`update nodes set last_heartbeat_at = now(), figures = '{"requests5m": 3, "errors5m": 1, "spoolBytes": 4096, "backfillBacklog": 7}' where id = $1`, [node.id]);
  t.match((await show(node.name)).body, { requests5m: 3, errorRate5m: 0.3333, spoolBytes: 4096, backfillBacklog: 7, configVersionsBehind: null });
  await pool.query(`update nodes set figures = '{"requests5m": 0, "errors5m": 2}' where id = $1`, [node.id]);
  t.match((await show(node.name)).body, { requests5m: 0, errorRate5m: 0 });
  await pool.query(`update nodes set figures = '{"requests5m": 2000, "errors5m": 1}' where id = $1`, [node.id]);
  t.match((await show(node.name)).body, { errorRate5m: 0.0005 });
  await pool.query(`update nodes set figures = '{"requests5m": "lots", "spoolBytes": -1}' where id = $1`, [node.id]);
  t.match((await show(node.name)).body, { requests5m: 0, spoolBytes: 0 }, 'a malformed figure shows as 0');
});

t.test('the stage field: none at creation, registered after enrollment, then what the gateway records', async (t) => {
  const created = await createNode(app);
  t.equal((await show(created.node.name)).body.onboardingStage, null);
  t.equal((await enroll(app, created.install.token)).statusCode, 200);
  const enrolled = (await show(created.node.name)).body;
  t.match(enrolled, { onboardingStage: 'registered', hostname: 'edge-host-1', arch: 'x86_64', version: '0.1.0', status: 'pending' });
  t.match(enrolled.enrolledAt, /^\d{4}-/);
  await pool.query(`update nodes set onboarding_stage = 'first-heartbeat' where id = $1`, [created.node.id]);
  t.equal((await show(created.node.name)).body.onboardingStage, 'first-heartbeat');
  await t.rejects(pool.query(`update nodes set onboarding_stage = 'dancing' where id = $1`, [created.node.id]), /check constraint/,
    'the database refuses unknown stages');
});

t.test('the nodes API requires the admin bearer token', async (t) => {
  const { node } = await createNode(app);
  const calls: Array<[string, string]> = [
    ['GET', '/api/v1/nodes'], ['GET', `/api/v1/nodes/${node.name}`], ['POST', '/api/v1/nodes'],
    ['DELETE', `/api/v1/nodes/${node.name}`], ['POST', `/api/v1/nodes/${node.name}/install-command`],
    ['PATCH', `/api/v1/nodes/${node.name}/network`],
  ];
  for (const [method, url] of calls) {
    const res = await app.inject({ method: method as 'GET', url });
    t.equal(res.statusCode, 401, `${method} ${url}`);
    t.equal(res.json<{ error: { code: string } }>().error.code, 'ZN_ERR_CP_UNAUTHENTICATED');
  }
  t.equal((await show(node.name)).status, 200, 'nothing was deleted');
});
