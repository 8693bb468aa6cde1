// A credentials-revoked event may reach a replica late: after a re-enrollment issued the node a new
// credential and the node authenticated with it. Such an event arriving between the credential
// check and the hello refuses the session only if the credential it presented is itself no longer
// accepted; a node-deleted event arriving there still refuses outright.
import t from 'tap';
import { issueCredential } from '../../control-plane/src/nodes/credentials.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import {
  connectNode, enrolledNode, gatewayIdentity, gatewaySettings, helloFor, migratedPool, refusalOf, startTestGateway, timingsOf, waitForRow,
  type HasTeardown, type NodeConnection, type TestGateway,
} from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const gateway = await startTestGateway(t, { pool, settings, identity });

/** Connects with `credential` and returns once the gateway checked it (the check acknowledges it). */
async function authenticated(t: HasTeardown, node: { id: string }, credentialId: string, credential: string): Promise<NodeConnection> {
  const conn = connectNode(t, gateway.server.port, identity.caPem, { nodeId: node.id, credential });
  await waitForRow(pool, 'the credential check', 'select acknowledged_at from node_credentials where id = $1', [credentialId],
    (r: { acknowledged_at: Date | null }) => r.acknowledged_at !== null);
  return conn;
}

/** Sends a node event the way the nodes module does, and waits until this gateway heard it. */
async function deliverEvent(gw: TestGateway, type: string, nodeId: string): Promise<void> {
  const heard = (): number => gw.log.lines().filter((l) => l.msg === 'node event received' && l.nodeId === nodeId && l.event === type).length;
  const before = heard();
  await pool.query("select pg_notify('zenova_node_events', $1)", [JSON.stringify({ type, nodeId })]);
  await waitFor(() => heard() > before, { what: `the gateway to hear ${type}` });
}

t.test('a revocation event heard between the credential check and the hello does not refuse a credential issued after it', async (t) => {
  const node = await enrolledNode(pool, settings);
  // Re-enrollment: the old credential revoked, a new one issued; the node connects with the new one.
  await pool.query('update node_credentials set revoked_at = now() where node_id = $1', [node.id]);
  const fresh = await issueCredential(pool, node.id, timingsOf(settings));
  const conn = await authenticated(t, node, fresh.credentialId, fresh.credential);

  // The revocation's NOTIFY reaches this replica only now.
  await deliverEvent(gateway, 'credentials-revoked', node.id);
  conn.send(helloFor(node));
  const ack = await conn.next('HelloAck');
  t.ok(ack.helloAck?.accepted, `welcomed, not refused (${ack.refusal?.error?.code ?? 'no refusal'})`);
  await waitFor(() => gateway.server.sessionCount() >= 1, { what: 'the session to be live' });
});

t.test('a revocation event heard before the hello still refuses the credential it revoked', async (t) => {
  const node = await enrolledNode(pool, settings);
  const conn = await authenticated(t, node, node.credentialId, node.credential);
  await pool.query('update node_credentials set revoked_at = now() where node_id = $1', [node.id]);
  await deliverEvent(gateway, 'credentials-revoked', node.id);
  conn.send(helloFor(node));
  const refusal = await refusalOf(conn, 'the session on the revoked credential');
  t.equal(refusal.code, 'CREDENTIAL_REVOKED');
  t.notOk(conn.received.some((m) => m.helloAck !== undefined), 'never welcomed');
});

t.test('a deletion event heard before the hello still refuses the session', async (t) => {
  const node = await enrolledNode(pool, settings);
  const conn = await authenticated(t, node, node.credentialId, node.credential);
  await deliverEvent(gateway, 'node-deleted', node.id);
  conn.send(helloFor(node));
  const refusal = await refusalOf(conn, 'the session of the deleted node');
  t.equal(refusal.code, 'NODE_DELETED');
  t.notOk(conn.received.some((m) => m.helloAck !== undefined), 'never welcomed');
});
