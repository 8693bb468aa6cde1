// Node events end live control streams: deleting a node or revoking its credentials (the nodes
// module's own transactions, with their NOTIFY) cuts the node's stream on every gateway sharing the
// database, also after the gateway's event connection was dropped and re-opened.
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { revokeNodeCredentials } from '../../control-plane/src/nodes/credentials.js';
import { deleteNode } from '../../control-plane/src/nodes/node-admin.js';
import { withTransaction } from '../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import {
  connectNode,
  enrolledNode,
  gatewayIdentity,
  gatewaySettings,
  liveSession,
  migratedPool,
  refusalOf,
  startTestGateway,
  testPool,
} from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const gateway = await startTestGateway(t, { pool, settings, identity });
const port = gateway.server.port;

t.test('deleting a node ends its live stream with NODE_DELETED, and it cannot connect again', async (t) => {
  const node = await enrolledNode(pool, settings);
  const bystander = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  const other = await liveSession(t, port, identity.caPem, bystander);
  await waitFor(() => gateway.server.sessionCount() >= 2, { what: 'both sessions to be live' });

  const deletedAt = Date.now();
  await deleteNode(pool, node.name);
  const refusal = await refusalOf(conn, 'the deleted node');
  t.comment(`stream ended ${Date.now() - deletedAt} ms after the delete committed`);
  t.equal(refusal.code, 'NODE_DELETED');
  t.equal(refusal.status.code, grpc.status.UNAUTHENTICATED);
  t.equal(refusal.retryable, false);
  t.equal(other.conn.received.length, 1, "another node's session is untouched");

  const again = connectNode(t, port, identity.caPem, { nodeId: node.id, credential: node.credential });
  t.equal((await refusalOf(again, 'the reconnect')).code, 'NODE_DELETED', 'a deleted node is refused at once');
});

t.test("revoking a node's credentials ends its live stream with CREDENTIAL_REVOKED", async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  await withTransaction(pool, (client) => revokeNodeCredentials(client, node.id));
  const refusal = await refusalOf(conn, 'the revoked node');
  t.equal(refusal.code, 'CREDENTIAL_REVOKED');
  t.equal(refusal.status.code, grpc.status.UNAUTHENTICATED);
});

t.test('a delete made through one control plane ends the stream held by another gateway on the same database', async (t) => {
  // A second replica: its own pool and its own gateway; the delete goes through the first pool.
  const otherPool = testPool(t, db.url);
  const otherGateway = await startTestGateway(t, { pool: otherPool, settings, identity });
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, otherGateway.server.port, identity.caPem, node);
  t.equal(otherGateway.server.sessionCount(), 1);

  await deleteNode(pool, node.name);
  const refusal = await refusalOf(conn, 'the node deleted on the other replica');
  t.equal(refusal.code, 'NODE_DELETED');
  t.equal(otherGateway.server.sessionCount(), 0);
});

t.test('a dropped event connection is re-opened by itself, and a delete still ends the stream', async (t) => {
  const listenerPids = async (): Promise<number[]> => {
    const { rows } = await pool.query<{ pid: number }>(
      `select pid from pg_stat_activity where datname = current_database() and application_name = 'zenova-control-node-events'`,
    );
    return rows.map((r) => r.pid);
  };
  // The previous test's second gateway has closed its event connection; the server may lag a moment.
  const before = await waitFor(async () => {
    const pids = await listenerPids();
    return pids.length === 1 ? pids : undefined;
  }, { what: 'one event connection for the one gateway' });
  await pool.query('select pg_terminate_backend($1)', [before[0]]);
  await waitFor(async () => {
    const now = await listenerPids();
    return now.length === 1 && now[0] !== before[0];
  }, { what: 'the event connection to be re-opened' });
  t.match(gateway.log.text(), /lost the node-event connection; reconnecting/);

  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  await deleteNode(pool, node.name);
  t.equal((await refusalOf(conn, 'the node deleted after the reconnect')).code, 'NODE_DELETED');
});

t.test('a live session is re-checked when the event connection comes back, so a delete made while it was down still ends it', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  const pids = await pool.query<{ pid: number }>(
    `select pid from pg_stat_activity where datname = current_database() and application_name = 'zenova-control-node-events'`,
  );
  // Delete without a NOTIFY (as if it had been sent while the listener was away), then drop the listener.
  await withTransaction(pool, async (client) => {
    await client.query('update nodes set deleted_at = now() where id = $1', [node.id]);
    await client.query('update node_credentials set revoked_at = now() where node_id = $1', [node.id]);
  });
  t.equal(conn.received.length, 1, 'no event, so the session is still up');
  await pool.query('select pg_terminate_backend($1)', [pids.rows[0]?.pid]);
  const refusal = await refusalOf(conn, 'the re-checked session');
  t.equal(refusal.code, 'NODE_DELETED');
});
