// A node's live figures (requests5m, errorRate5m, backfillBacklog, spoolBytes) are those of its
// last heartbeat. Before the first there is none: the API answers null for each, as for
// clockSkewMs, not 0, which reads as measured. A hello alone measures nothing either. After a
// heartbeat over the real control stream they are its figures, zeros included. Real PostgreSQL,
// the real gateway over TLS and the admin API on the same database.
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { enrolledNode, gatewayIdentity, gatewaySettings, liveSession, migratedPool, startTestGateway } from './gateway-harness.js';
import { bearer, createNode, nodesApp } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const gateway = await startTestGateway(t, { pool, settings, identity });
const { app } = await nodesApp(t, db.url);

interface View {
  name: string; lastHeartbeatAt: string | null; clockSkewMs: number | null;
  requests5m: number | null; errorRate5m: number | null; backfillBacklog: number | null; spoolBytes: number | null;
}

const NO_FIGURES = { requests5m: null, errorRate5m: null, backfillBacklog: null, spoolBytes: null };

async function shown(name: string): Promise<{ single: View; listed: View | undefined }> {
  const single = await app.inject({ method: 'GET', url: `/api/v1/nodes/${name}`, headers: bearer });
  const list = await app.inject({ method: 'GET', url: '/api/v1/nodes', headers: bearer });
  if (single.statusCode !== 200 || list.statusCode !== 200) throw new Error(`GET answered ${single.statusCode} / ${list.statusCode}: ${single.body}`);
  return { single: single.json<View>(), listed: list.json<{ nodes: View[] }>().nodes.find((n) => n.name === name) };
}

const figuresOf = (view: View | undefined) => view === undefined ? undefined : {
  requests5m: view.requests5m, errorRate5m: view.errorRate5m, backfillBacklog: view.backfillBacklog, spoolBytes: view.spoolBytes,
};

t.test('a node just created shows null figures, in its view and in the list, as its clock skew', async (t) => {
  const { node } = await createNode(app);
  t.same(figuresOf(node as unknown as View), NO_FIGURES, 'the create answer');
  const { single, listed } = await shown(node.name);
  t.equal(single.lastHeartbeatAt, null);
  t.equal(single.clockSkewMs, null);
  t.same(figuresOf(single), NO_FIGURES, 'GET of the node');
  t.same(figuresOf(listed), NO_FIGURES, 'the list');
});

t.test('an enrolled node that said hello but sent no heartbeat still shows null; its first heartbeat\'s figures after, zeros as 0', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  // The hello was recorded (its facts are on the row) before any heartbeat.
  await waitFor(async () => {
    const { rows } = await pool.query<{ version: string | null }>('select version from nodes where id = $1', [node.id]);
    return rows[0]?.version === '0.1.0' ? true : undefined;
  }, { what: 'the hello recorded' });
  const before = await shown(node.name);
  t.equal(before.single.lastHeartbeatAt, null, 'no heartbeat yet');
  t.same(figuresOf(before.single), NO_FIGURES, 'a hello measures nothing');
  t.same(figuresOf(before.listed), NO_FIGURES);

  conn.send({ heartbeat: { sentAt: BigInt(Date.now()), requests5m: 40n, errors5m: 1n, spoolBytes: 0n, backfillBacklog: 0n, appliedConfigVersion: 0n, ready: true } });
  const after = await waitFor(async () => {
    const view = await shown(node.name);
    return view.single.lastHeartbeatAt !== null ? view : undefined;
  }, { what: 'the heartbeat in the node view' });
  const measured = { requests5m: 40, errorRate5m: 0.025, backfillBacklog: 0, spoolBytes: 0 };
  t.same(figuresOf(after.single), measured, 'the heartbeat\'s figures; its zeros are measured ones');
  t.same(figuresOf(after.listed), measured, 'the list too');
  t.type(after.single.clockSkewMs, 'number');
  conn.end();
});
