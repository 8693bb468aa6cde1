// A live control session lasts only as long as the credential it authenticated with: once that
// credential expires, or its handover window ends, the session is refused with the code a reconnect
// with it would get, even when the node never acknowledged the rotation it was offered. The node
// then connects with the successor it saved. Real TLS, a real database and the gateway's own clock
// moved forward.
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import type { NodeMessage } from '../../proto/src/index.js';
import { testDatabase } from '../fixtures/postgres.js';
import {
  connectNode,
  enrolledNode,
  gatewayIdentity,
  gatewaySettings,
  helloFor,
  liveSession,
  migratedPool,
  refusalOf,
  startTestGateway,
  waitForRow,
} from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const MINUTE_MS = 60_000;
const DAY_MS = 24 * 60 * MINUTE_MS;

const heartbeat: NodeMessage = {
  heartbeat: { sentAt: 0n, requests5m: 1n, errors5m: 0n, spoolBytes: 0n, backfillBacklog: 0n, appliedConfigVersion: 0n, ready: true },
};

async function acknowledged(credentialId: string): Promise<void> {
  await waitForRow(pool, `credential ${credentialId} to be acknowledged`, 'select acknowledged_at from node_credentials where id = $1', [credentialId],
    (r: { acknowledged_at: Date | null }) => r.acknowledged_at !== null);
}

t.test('a live session whose credential expires before the node acknowledges its rotation is refused CREDENTIAL_EXPIRED, and the saved successor connects', async (t) => {
  // Rotation checked every 2 s: the check itself, with no message from the node, ends the session.
  const settings = gatewaySettings(db.url, { credentialRotateAfterMs: 2_000 });
  const gateway = await startTestGateway(t, { pool, settings, identity });
  // One day of validity left: the successor offered on hello outlives it by 29 days.
  const node = await enrolledNode(pool, settings, { issuedAt: new Date(Date.now() - settings.nodes.credentialValidityMs + DAY_MS) });
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const rotation = (await conn.next('the rotation on hello')).credentialRotation;
  if (rotation === undefined) throw new Error('expected a credential rotation');
  // The node saves the successor but its acknowledgement never arrives.

  gateway.shiftClock(DAY_MS + MINUTE_MS);
  const fresh = connectNode(t, gateway.server.port, identity.caPem, { nodeId: node.id, credential: node.credential });
  fresh.send(helloFor(node));
  const reconnect = await refusalOf(fresh, 'a new connection with the expired credential');
  t.equal(reconnect.code, 'CREDENTIAL_EXPIRED', 'a new connection with the expired credential is refused');

  const ended = await refusalOf(conn, 'the live session on the expired credential');
  t.equal(ended.code, 'CREDENTIAL_EXPIRED', 'the live session is refused with the same code');
  t.equal(ended.message, reconnect.message, 'and the same message');
  t.equal(ended.status.code, grpc.status.UNAUTHENTICATED);
  t.equal(gateway.server.sessionCount(), 0, 'no session is left on the expired credential');

  const successor = await liveSession(t, gateway.server.port, identity.caPem, node, rotation.credential);
  t.equal(successor.ack.helloAck?.accepted, true, 'the successor the node saved authenticates');
  await acknowledged(rotation.credentialId);
});

t.test('a heartbeat on a session whose credential has expired is refused CREDENTIAL_EXPIRED and not recorded', async (t) => {
  // Default timings: the rotation check runs once a minute, so only the heartbeat can notice.
  const settings = gatewaySettings(db.url);
  const gateway = await startTestGateway(t, { pool, settings, identity });
  const node = await enrolledNode(pool, settings, { issuedAt: new Date(Date.now() - settings.nodes.credentialValidityMs + DAY_MS) });
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const rotation = (await conn.next('the rotation on hello')).credentialRotation;
  if (rotation === undefined) throw new Error('expected a credential rotation');
  await pool.query('update nodes set last_heartbeat_at = null where id = $1', [node.id]);

  gateway.shiftClock(DAY_MS + MINUTE_MS);
  conn.send(heartbeat);
  const ended = await refusalOf(conn, 'the heartbeat on the expired credential');
  t.equal(ended.code, 'CREDENTIAL_EXPIRED', 'the session is refused as a reconnect would be');
  const { rows } = await pool.query<{ last_heartbeat_at: Date | null }>('select last_heartbeat_at from nodes where id = $1', [node.id]);
  t.equal(rows[0]?.last_heartbeat_at, null, 'the heartbeat sent on the expired credential is not recorded');
});

t.test('a live session on a superseded credential is refused CREDENTIAL_SUPERSEDED when its handover window ends', async (t) => {
  const settings = gatewaySettings(db.url);
  const handoverMs = settings.nodes.credentialHandoverMs;
  const gateway = await startTestGateway(t, { pool, settings, identity });
  const node = await enrolledNode(pool, settings, { issuedAt: new Date(Date.now() - 2 * DAY_MS) });

  // The node stores and acknowledges a successor: its first credential now ends one window later.
  const first = await liveSession(t, gateway.server.port, identity.caPem, node);
  const acked = (await first.conn.next('the rotation on hello')).credentialRotation;
  if (acked === undefined) throw new Error('expected a credential rotation');
  first.conn.send({ credentialRotationAck: { credentialId: acked.credentialId } });
  await acknowledged(acked.credentialId);
  first.conn.end();
  await first.conn.finalStatus('the first stream to end');

  // Back inside the window with the old credential; the rotation it is offered is not acknowledged.
  const old = await liveSession(t, gateway.server.port, identity.caPem, node);
  const offered = (await old.conn.next('a rotation of the superseded credential')).credentialRotation;
  if (offered === undefined) throw new Error('expected a credential rotation');

  gateway.shiftClock(handoverMs + MINUTE_MS);
  const fresh = connectNode(t, gateway.server.port, identity.caPem, { nodeId: node.id, credential: node.credential });
  const reconnect = await refusalOf(fresh, 'a new connection with the superseded credential');
  t.equal(reconnect.code, 'CREDENTIAL_SUPERSEDED', 'a new connection with it is refused');
  old.conn.send(heartbeat);
  const ended = await refusalOf(old.conn, 'the live session on the superseded credential');
  t.equal(ended.code, 'CREDENTIAL_SUPERSEDED', 'the live session is refused with the same code');
  t.equal(ended.message, reconnect.message, 'and the same message');

  const successor = await liveSession(t, gateway.server.port, identity.caPem, node, offered.credential);
  t.equal(successor.ack.helloAck?.accepted, true, 'the successor offered on that session authenticates');
});
