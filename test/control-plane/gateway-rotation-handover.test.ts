// The handover window of a rotated credential starts when the node is known to hold the successor
// (its ack, or connecting with the successor), never when the successor is issued: a node whose
// rotation reply was lost, and that then stays away for hours, is not locked out. Real TLS, a real
// database and the gateway's own clock moved forward.
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import {
  connectNode,
  enrolledNode,
  gatewayIdentity,
  gatewaySettings,
  liveSession,
  migratedPool,
  refusalOf,
  startTestGateway,
} from './gateway-harness.js';
import { credentialAcknowledged } from './credential-rotation-fixtures.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const MINUTE_MS = 60_000;
const HOUR_MS = 60 * MINUTE_MS;
const DAY_MS = 24 * HOUR_MS;

t.test('a node whose rotation reply was lost and that stays away two hours is accepted with its old credential and rotated again', async (t) => {
  const settings = gatewaySettings(db.url, {}, { dropRotationReplies: 1 });
  t.ok(2 * HOUR_MS > settings.nodes.credentialHandoverMs, 'the node stays away longer than the handover window');
  const gateway = await startTestGateway(t, { pool, settings, identity });
  // Issued two days ago: past rotate-after, so the hello brings a rotation (the one that is lost).
  const node = await enrolledNode(pool, settings, { issuedAt: new Date(Date.now() - 2 * DAY_MS) });

  const lost = await liveSession(t, gateway.server.port, identity.caPem, node);
  const cut = await lost.conn.finalStatus('the stream to be cut');
  t.equal(cut.code, grpc.status.UNAVAILABLE, 'the stream ends as if the connection dropped');
  t.equal(lost.conn.received.length, 1, 'only the HelloAck arrived: the node never got the new credential');
  const issued = await pool.query<{ id: string }>('select id from node_credentials where node_id = $1 and id <> $2', [node.id, node.credentialId]);
  t.equal(issued.rowCount, 1, 'the gateway did issue the credential whose reply was lost');
  const lostId = issued.rows[0]!.id;

  gateway.shiftClock(2 * HOUR_MS);
  const back = await liveSession(t, gateway.server.port, identity.caPem, node);
  t.equal(back.ack.helloAck?.accepted, true, 'the only credential the node has still works');
  const fresh = (await back.conn.next('a fresh rotation')).credentialRotation;
  if (fresh === undefined) throw new Error('expected a credential rotation');
  t.not(fresh.credentialId, lostId, 'a fresh credential, not the lost one');
  const lostRow = await pool.query<{ revoked_at: Date | null }>('select revoked_at from node_credentials where id = $1', [lostId]);
  t.not(lostRow.rows[0]?.revoked_at, null, 'the never-delivered credential is revoked');
  back.conn.send({ credentialRotationAck: { credentialId: fresh.credentialId } });
  await credentialAcknowledged(pool, fresh.credentialId);
  back.conn.end();
  await back.conn.finalStatus('the stream to end');

  const current = await liveSession(t, gateway.server.port, identity.caPem, node, fresh.credential);
  t.equal(current.ack.helloAck?.accepted, true, 'the fresh credential authenticates');
});

t.test('the old credential stops working one handover window after the successor is acknowledged, not after it is issued', async (t) => {
  const settings = gatewaySettings(db.url);
  const handoverMs = settings.nodes.credentialHandoverMs;
  const gateway = await startTestGateway(t, { pool, settings, identity });
  const node = await enrolledNode(pool, settings, { issuedAt: new Date(Date.now() - 2 * DAY_MS) });

  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const rotation = (await conn.next('the rotation on hello')).credentialRotation;
  if (rotation === undefined) throw new Error('expected a credential rotation');
  // The node is slow to acknowledge: well past a handover window after the issue.
  gateway.shiftClock(3 * HOUR_MS);
  conn.send({ credentialRotationAck: { credentialId: rotation.credentialId } });
  await credentialAcknowledged(pool, rotation.credentialId);
  conn.end();
  await conn.finalStatus('the stream to end');

  gateway.shiftClock(handoverMs - 5 * MINUTE_MS);
  const inside = await liveSession(t, gateway.server.port, identity.caPem, node);
  t.equal(inside.ack.helloAck?.accepted, true, 'inside the window that began with the ack, the old credential works');
  inside.conn.end();
  await inside.conn.finalStatus('the stream inside the window to end');

  gateway.shiftClock(10 * MINUTE_MS);
  const late = connectNode(t, gateway.server.port, identity.caPem, { nodeId: node.id, credential: node.credential });
  const refusal = await refusalOf(late, 'the superseded credential');
  t.equal(refusal.code, 'CREDENTIAL_SUPERSEDED', 'one window after the ack it is refused');
  t.equal(refusal.status.code, grpc.status.UNAUTHENTICATED);
  const current = await liveSession(t, gateway.server.port, identity.caPem, node, rotation.credential);
  t.equal(current.ack.helloAck?.accepted, true, 'the acknowledged credential keeps working');
});

t.test('connecting with the successor without an explicit ack acknowledges it and starts the old credential\'s window', async (t) => {
  const settings = gatewaySettings(db.url);
  const handoverMs = settings.nodes.credentialHandoverMs;
  const gateway = await startTestGateway(t, { pool, settings, identity });
  const node = await enrolledNode(pool, settings, { issuedAt: new Date(Date.now() - 2 * DAY_MS) });

  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const rotation = (await conn.next('the rotation on hello')).credentialRotation;
  if (rotation === undefined) throw new Error('expected a credential rotation');
  // The node saved the credential but its ack was lost with the connection.
  conn.end();
  await conn.finalStatus('the stream to end');
  const unacked = await pool.query<{ acknowledged_at: Date | null }>('select acknowledged_at from node_credentials where id = $1', [rotation.credentialId]);
  t.equal(unacked.rows[0]?.acknowledged_at, null, 'no ack reached the control plane');

  gateway.shiftClock(3 * HOUR_MS);
  const next = await liveSession(t, gateway.server.port, identity.caPem, node, rotation.credential);
  t.equal(next.ack.helloAck?.accepted, true, 'the successor authenticates');
  await credentialAcknowledged(pool, rotation.credentialId);
  next.conn.end();
  await next.conn.finalStatus('the stream with the successor to end');

  gateway.shiftClock(handoverMs - 5 * MINUTE_MS);
  const inside = await liveSession(t, gateway.server.port, identity.caPem, node);
  t.equal(inside.ack.helloAck?.accepted, true, 'the old credential still works inside the window');
  inside.conn.end();
  await inside.conn.finalStatus('the stream inside the window to end');

  gateway.shiftClock(10 * MINUTE_MS);
  const late = connectNode(t, gateway.server.port, identity.caPem, { nodeId: node.id, credential: node.credential });
  const refusal = await refusalOf(late, 'the superseded credential');
  t.equal(refusal.code, 'CREDENTIAL_SUPERSEDED', 'one window after the successor was presented the old one is refused');
  const current = await liveSession(t, gateway.server.port, identity.caPem, node, rotation.credential);
  t.equal(current.ack.helloAck?.accepted, true, 'the successor keeps working');
});
