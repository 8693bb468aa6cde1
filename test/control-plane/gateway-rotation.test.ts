// Credential rotation over the control stream, over real TLS and a real database: rotation on hello
// and on the timer, acknowledgements, a rotation reply lost on purpose, and the handover window.
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
const DAY_MS = 86_400_000;

const secretOf = (credential: string): string => credential.split('.')[1] ?? '';

t.test('a credential older than rotate-after is rotated on hello and again on the timer, and each new one authenticates', async (t) => {
  const settings = gatewaySettings(db.url, { credentialRotateAfterMs: 1 });
  const gateway = await startTestGateway(t, { pool, settings, identity });
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);

  const startedAt = Date.now();
  const first = (await conn.next('the rotation on hello')).credentialRotation;
  if (first === undefined) throw new Error('expected a credential rotation');
  t.not(first.credentialId, node.credentialId, 'a new credential');
  t.ok(first.credential.startsWith(`${first.credentialId}.`), 'the opaque credential carries its id');
  t.ok(Number(first.expiresAt) > startedAt + settings.nodes.credentialValidityMs - 60_000, 'valid for the configured validity');
  t.ok(Number(first.previousValidUntil) > startedAt, 'the old credential keeps working for a while');
  t.ok(Number(first.previousValidUntil) <= startedAt + settings.nodes.credentialHandoverMs + 60_000, 'but only for the handover window');
  conn.send({ credentialRotationAck: { credentialId: first.credentialId } });
  await credentialAcknowledged(pool, first.credentialId);

  const second = (await conn.next('the rotation on the timer')).credentialRotation;
  if (second === undefined) throw new Error('expected a second credential rotation');
  t.not(second.credentialId, first.credentialId, 'the timer rotates the acknowledged credential in turn');
  conn.send({ credentialRotationAck: { credentialId: second.credentialId } });
  await credentialAcknowledged(pool, second.credentialId);
  conn.end();
  await conn.finalStatus('the first stream to end');

  const next = await liveSession(t, gateway.server.port, identity.caPem, node, second.credential);
  t.equal(next.ack.helloAck?.accepted, true, 'the newest credential authenticates');
  const log = gateway.log.text();
  for (const credential of [node.credential, first.credential, second.credential]) {
    t.notMatch(log, secretOf(credential), 'no credential secret reaches the log');
  }
});

t.test('a credential an earlier run issued with a validity shorter than twice rotate-after is rotated at half its life, before it expires', async (t) => {
  const HOUR_MS = 3_600_000;
  const earlier = gatewaySettings(db.url, { credentialValidityMs: 12 * HOUR_MS });
  const settings = gatewaySettings(db.url); // rotate-after: one day, longer than that credential lives
  const gateway = await startTestGateway(t, { pool, settings, identity });
  const node = await enrolledNode(pool, earlier, { issuedAt: new Date(Date.now() - 7 * HOUR_MS) });
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const rotation = (await conn.next('the rotation on hello')).credentialRotation;
  if (rotation === undefined) throw new Error('expected a credential rotation');
  t.not(rotation.credentialId, node.credentialId, 'a successor, 5 h before the old one expires');
  t.ok(Number(rotation.expiresAt) > Date.now() + settings.nodes.credentialValidityMs - 60_000, "valid for this run's validity");
});

t.test('a lost rotation reply: the old credential still works inside the handover window, brings a fresh rotation, and is refused after it', async (t) => {
  const settings = gatewaySettings(db.url, {}, { dropRotationReplies: 1 });
  const gateway = await startTestGateway(t, { pool, settings, identity });
  // Issued two days ago: past the default rotate-after of one day, so hello triggers a rotation.
  const node = await enrolledNode(pool, settings, { issuedAt: new Date(Date.now() - 2 * DAY_MS) });

  const lost = await liveSession(t, gateway.server.port, identity.caPem, node);
  const cut = await lost.conn.finalStatus('the stream to be cut');
  t.equal(cut.code, grpc.status.UNAVAILABLE, 'the stream ends as if the connection dropped');
  t.equal(lost.conn.received.length, 1, 'only the HelloAck arrived, the rotation reply was lost');
  const issued = await pool.query<{ id: string }>('select id from node_credentials where node_id = $1 and id <> $2', [node.id, node.credentialId]);
  t.equal(issued.rowCount, 1, 'the gateway did issue the credential whose reply was lost');
  const lostId = issued.rows[0]!.id;

  const retry = await liveSession(t, gateway.server.port, identity.caPem, node);
  t.equal(retry.ack.helloAck?.accepted, true, 'the old credential works inside the handover window');
  const fresh = (await retry.conn.next('a fresh rotation')).credentialRotation;
  if (fresh === undefined) throw new Error('expected a credential rotation');
  t.not(fresh.credentialId, lostId, 'a fresh credential, not the lost one');
  const lostRow = await pool.query<{ revoked_at: Date | null }>('select revoked_at from node_credentials where id = $1', [lostId]);
  t.not(lostRow.rows[0]?.revoked_at, null, 'the never-delivered credential is revoked');
  retry.conn.send({ credentialRotationAck: { credentialId: fresh.credentialId } });
  await credentialAcknowledged(pool, fresh.credentialId);
  retry.conn.end();
  await retry.conn.finalStatus('the retry stream to end');

  gateway.shiftClock(settings.nodes.credentialHandoverMs + 60_000);
  const late = connectNode(t, gateway.server.port, identity.caPem, { nodeId: node.id, credential: node.credential });
  const refusal = await refusalOf(late, 'the superseded credential');
  t.equal(refusal.code, 'CREDENTIAL_SUPERSEDED', 'after the window the old credential is refused');
  t.equal(refusal.status.code, grpc.status.UNAUTHENTICATED);

  const current = await liveSession(t, gateway.server.port, identity.caPem, node, fresh.credential);
  t.equal(current.ack.helloAck?.accepted, true, 'the new credential keeps working');
});

t.test('an acknowledgement of a credential the session did not hand out changes nothing', async (t) => {
  const settings = gatewaySettings(db.url);
  const gateway = await startTestGateway(t, { pool, settings, identity });
  const node = await enrolledNode(pool, settings, { issuedAt: new Date(Date.now() - 2 * DAY_MS) });
  const other = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const rotation = (await conn.next('the rotation')).credentialRotation;
  if (rotation === undefined) throw new Error('expected a credential rotation');
  conn.send({ credentialRotationAck: { credentialId: other.credentialId } });
  conn.send({ credentialRotationAck: { credentialId: rotation.credentialId } });
  await credentialAcknowledged(pool, rotation.credentialId);
  const foreign = await pool.query<{ acknowledged_at: Date | null }>('select acknowledged_at from node_credentials where id = $1', [other.credentialId]);
  t.equal(foreign.rows[0]?.acknowledged_at, null, "another node's credential is not acknowledged");
  t.match(gateway.log.text(), /ignoring an acknowledgement of a credential this session did not hand out/);
});
