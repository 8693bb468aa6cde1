// A node applied a pushed config but its ack never got recorded (the stream dropped between apply
// and ack, the control plane died first, or recording it failed). The session pushes nothing a node
// already serves, so no later ack corrects the record: the node's next hello (once checked to be of
// this control plane's versions) and its heartbeats record what the session knows it holds, and a
// node's own claim past what it was sent or past the newest version is never recorded.
import t from 'tap';
import type { Test } from 'tap';
import { latestConfigVersion } from '../../control-plane/src/config/config-changes.js';
import { findNodeById } from '../../control-plane/src/nodes/node-repository.js';
import { toNodeView, type NodeView } from '../../control-plane/src/nodes/node-view.js';
import type { NodeMessage } from '../../proto/src/index.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { changeConfig, seedConfig } from './bundle-seed.js';
import {
  connectNode, enrolledNode, gatewayIdentity, gatewaySettings, harnessSecretBox, helloFor, liveSession, migratedPool, startTestGateway,
  type EnrolledNode, type NodeConnection,
} from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const gateway = await startTestGateway(t, { pool, settings, identity });
const port = gateway.server.port;
await seedConfig(pool, harnessSecretBox);

async function viewOf(nodeId: string): Promise<NodeView> {
  const row = await findNodeById(pool, nodeId);
  if (row === undefined) throw new Error(`no node ${nodeId}`);
  return toNodeView(row, { offlineAfterMs: settings.nodes.offlineAfterMs });
}

function heartbeat(appliedConfigVersion: bigint): NodeMessage {
  return { heartbeat: { sentAt: BigInt(Date.now()), requests5m: 0n, errors5m: 0n, spoolBytes: 0n, backfillBacklog: 0n, appliedConfigVersion, ready: true } };
}

/**
 * Sends a heartbeat and waits until it is recorded. A session handles messages in order, so
 * everything sent before it (the hello, an ack) has been handled by then.
 */
async function heartbeatRecorded(conn: NodeConnection, node: EnrolledNode, appliedConfigVersion: bigint): Promise<NodeView> {
  const { rows } = await pool.query<{ at: Date | null }>('select last_heartbeat_at as at from nodes where id = $1', [node.id]);
  const before = rows[0]?.at?.getTime() ?? 0;
  conn.send(heartbeat(appliedConfigVersion));
  return waitFor(async () => {
    const { rows: now } = await pool.query<{ at: Date | null; hb: string | null }>(
      "select last_heartbeat_at as at, figures->>'appliedConfigVersion' as hb from nodes where id = $1", [node.id],
    );
    const row = now[0];
    const recorded = row?.at !== null && row?.at !== undefined && row.at.getTime() > before && row.hb === String(appliedConfigVersion);
    return recorded ? viewOf(node.id) : undefined;
  }, { what: `the heartbeat saying ${appliedConfigVersion} to be recorded` });
}

/** The node leaves without acknowledging the push it was sent (its ack lost with the stream). */
async function leaveWithoutAck(conn: NodeConnection): Promise<void> {
  conn.end();
  await conn.finalStatus('the stream to close');
}

async function reconnect(t: Test, node: EnrolledNode, hello: Parameters<typeof helloFor>[1]): Promise<NodeConnection> {
  const conn = connectNode(t, port, identity.caPem, { nodeId: node.id, credential: node.credential });
  conn.send(helloFor(node, hello));
  const ack = await conn.next('HelloAck');
  if (ack.helloAck === undefined) throw new Error(`expected HelloAck, got ${JSON.stringify(Object.keys(ack))}`);
  return conn;
}

t.test('a node whose config ack was lost is shown current from its next hello, and no hello or heartbeat can claim a version past the newest', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  const first = await conn.nextConfigPush('the first push');
  conn.ackConfig(first.version);
  await waitFor(async () => (await viewOf(node.id)).appliedConfigVersion === Number(first.version), { what: 'the first ack recorded' });

  const changed = await changeConfig(pool);
  const second = await conn.nextConfigPush('the push of the change');
  t.equal(Number(second.version), changed);
  await leaveWithoutAck(conn);
  t.match(await viewOf(node.id), { appliedConfigVersion: Number(first.version), configVersionsBehind: changed - Number(first.version) }, 'the lost ack left the node behind');

  // The node applied the change before its ack was lost: its hello says it serves it.
  const next = await reconnect(t, node, { appliedConfigVersion: second.version });
  const view = await heartbeatRecorded(next, node, second.version);
  t.match(view, { appliedConfigVersion: changed, configVersionsBehind: 0, onboardingStage: 'config-synced', configError: null }, 'current, as the node is');
  t.equal(next.configPushes.length, 0, 'nothing pushed: the node serves the newest version');

  // Its heartbeats vouch for nothing past what the session knows the node holds.
  const lie = await heartbeatRecorded(next, node, second.version + 1_000n);
  t.equal(lie.appliedConfigVersion, changed, 'a heartbeat claiming a version past the newest does not raise it');
  await leaveWithoutAck(next);

  // Past any catch-up a restored database allows: the versions stay, and so does the record.
  const latest = await latestConfigVersion(pool);
  const far = BigInt(latest) + 2_000_000n;
  const liar = await reconnect(t, node, { appliedConfigVersion: far });
  const afterLie = await heartbeatRecorded(liar, node, far);
  t.equal(afterLie.appliedConfigVersion, changed, 'a hello claiming a version this control plane never had is not recorded');
  t.equal(await latestConfigVersion(pool), latest, 'the versions did not move');
  liar.end();
});

t.test('a node whose first config ack was lost reaches config-synced from its next hello', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  const push = await conn.nextConfigPush('the first push');
  await leaveWithoutAck(conn);
  t.match(await viewOf(node.id), { appliedConfigVersion: null, onboardingStage: 'registered' });

  const next = await reconnect(t, node, { appliedConfigVersion: push.version });
  const view = await heartbeatRecorded(next, node, push.version);
  t.match(view, { appliedConfigVersion: Number(push.version), configVersionsBehind: 0, onboardingStage: 'config-synced' });
  t.equal(next.configPushes.length, 0, 'nothing pushed: the node serves the newest version');
  next.end();
});

t.test('a config ack the control plane could not record is recorded from the node\'s next heartbeat', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  const push = await conn.nextConfigPush('the first push');

  // Recording this node's applied version fails (as a database error would) until the trigger goes.
  const fn = `fail_applied_${node.id.replaceAll('-', '')}`;
  await pool.query(`create function ${fn}() returns trigger language plpgsql as $$
    begin raise exception 'test: the applied version cannot be recorded'; end $$`);
  await pool.query(`create trigger ${fn} before update on nodes for each row
    when (new.id = '${node.id}' and new.applied_config_version is distinct from old.applied_config_version) execute function ${fn}()`);
  t.teardown(() => pool.query(`drop trigger if exists ${fn} on nodes; drop function if exists ${fn}()`));

  conn.ackConfig(push.version);
  await waitFor(
    () => gateway.log.lines().some((l) => l.msg === 'could not record the config ack' && l.nodeId === node.id),
    { what: 'the ack to fail to be recorded' },
  );
  await pool.query(`drop trigger ${fn} on nodes; drop function ${fn}()`);
  t.equal((await viewOf(node.id)).appliedConfigVersion, null, 'the ack is not on record');

  const view = await heartbeatRecorded(conn, node, push.version);
  t.match(view, { appliedConfigVersion: Number(push.version), configVersionsBehind: 0, onboardingStage: 'config-synced' });
  conn.end();
});

// Last in this file: the continuation row it writes stays, as after a real restore.
t.test('a version below where a restored database continued its versions is not recorded from a hello or heartbeat, as its content may be another timeline\'s', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  const push = await conn.nextConfigPush('the first push');
  await leaveWithoutAck(conn);

  // A restore moved the versions past this one (config-changes.ts continueVersionsPast), then a change.
  await pool.query("insert into config_changes (entity, entity_id, action) values ('installation', null, 'versions-continued')");
  const changed = await changeConfig(pool);
  t.ok(changed > Number(push.version));

  const next = await reconnect(t, node, { appliedConfigVersion: push.version });
  const view = await heartbeatRecorded(next, node, push.version);
  t.match(view, { appliedConfigVersion: null, onboardingStage: 'first-heartbeat' }, 'neither the hello nor the heartbeat recorded it');
  const pushed = await next.nextConfigPush('the push of the newest version');
  t.equal(Number(pushed.version), changed, 'the node is sent the newest version, whose ack records it');
  next.ackConfig(pushed.version);
  await waitFor(async () => (await viewOf(node.id)).appliedConfigVersion === changed, { what: 'the ack of the newest version recorded' });
  next.end();
});
