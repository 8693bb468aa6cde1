// A rotation the node does not acknowledge (it could not store it: a full disk) is not repeated on
// every rotation check of its session, nor left for good: the same credential is offered again
// once ROTATION_REOFFER_AFTER_MS has passed on the credential clock, adding no credential row; one
// revoked meanwhile (another replica rotated) is replaced by a fresh rotation instead.
import t from 'tap';
import { ROTATION_REOFFER_AFTER_MS } from '../../control-plane/src/gateway/session.js';
import { rotateCredential } from '../../control-plane/src/nodes/credentials.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { enrolledNode, gatewayIdentity, gatewaySettings, liveSession, migratedPool, startTestGateway, timingsOf, waitForRow } from './gateway-harness.js';
import type { NodeConnection } from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const DAY_MS = 86_400_000;
// Rotation checks every second (the check interval follows rotate-after, at least 1 s).
const settings = gatewaySettings(db.url, { credentialRotateAfterMs: 1_000 });
const CHECK_MS = 1_000;

async function credentialRows(nodeId: string): Promise<Array<{ id: string; revoked: boolean; acknowledged: boolean }>> {
  const { rows } = await pool.query<{ id: string; revoked: boolean; acknowledged: boolean }>(
    'select id, revoked_at is not null as revoked, acknowledged_at is not null as acknowledged from node_credentials where node_id = $1 order by issued_at',
    [nodeId],
  );
  return rows;
}

/** Lets `checks` rotation checks of the session pass, the node sending heartbeats meanwhile. */
async function letChecksPass(conn: NodeConnection, checks: number): Promise<void> {
  const until = performance.now() + checks * CHECK_MS;
  await waitFor(() => {
    conn.send({ heartbeat: { sentAt: BigInt(Date.now()), requests5m: 0n, errors5m: 0n, spoolBytes: 0n, backfillBacklog: 0n, appliedConfigVersion: 0n, ready: true } });
    return performance.now() >= until;
  }, { what: `${checks} rotation checks`, timeoutMs: checks * CHECK_MS + 5_000, intervalMs: 200 });
}

const rotationsOf = (conn: NodeConnection): Array<{ credentialId: string; credential: string }> =>
  conn.received.flatMap((m) => (m.credentialRotation !== undefined ? [m.credentialRotation] : []));

t.test('an unacknowledged rotation is offered again on its session only once the re-offer interval has passed, as the same credential and without a new row', async (t) => {
  const gateway = await startTestGateway(t, { pool, settings, identity });
  const node = await enrolledNode(pool, settings, { issuedAt: new Date(Date.now() - 2 * DAY_MS) });
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const first = (await conn.next('the rotation on hello')).credentialRotation;
  if (first === undefined) throw new Error('expected a credential rotation');

  await letChecksPass(conn, 3);
  t.equal(rotationsOf(conn).length, 1, 'no rotation per check while the first is unacknowledged');
  t.equal((await credentialRows(node.id)).length, 2, 'the enrolled credential and its successor');

  gateway.shiftClock(ROTATION_REOFFER_AFTER_MS);
  const again = await waitFor(() => rotationsOf(conn)[1], { what: 'the rotation offered again' });
  t.equal(again.credentialId, first.credentialId, 'the same credential');
  t.equal(again.credential, first.credential);
  t.match(gateway.log.lines().find((l) => l.msg === 'the node has not acknowledged its new credential; offering it again'), { newCredId: first.credentialId });

  conn.send({ credentialRotationAck: { credentialId: first.credentialId } });
  await waitForRow(pool, 'the acknowledgement', 'select acknowledged_at from node_credentials where id = $1', [first.credentialId],
    (r: { acknowledged_at: Date | null }) => r.acknowledged_at !== null);
  t.same((await credentialRows(node.id)).map((r) => r.revoked), [false, false], 'two rows, none revoked');
});

t.test('an unacknowledged rotation revoked meanwhile by another replica is replaced by a fresh rotation when its re-offer comes due', async (t) => {
  const gateway = await startTestGateway(t, { pool, settings, identity });
  const node = await enrolledNode(pool, settings, { issuedAt: new Date(Date.now() - 2 * DAY_MS) });
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const first = (await conn.next('the rotation on hello')).credentialRotation;
  if (first === undefined) throw new Error('expected a credential rotation');
  // Another replica's session of the node rotates from the same credential: the first successor is revoked.
  await rotateCredential(pool, node.id, node.credentialId, timingsOf(settings));

  gateway.shiftClock(ROTATION_REOFFER_AFTER_MS);
  const fresh = await waitFor(() => rotationsOf(conn)[1], { what: 'a fresh rotation' });
  t.not(fresh.credentialId, first.credentialId, 'not the revoked credential');
  conn.send({ credentialRotationAck: { credentialId: fresh.credentialId } });
  await waitForRow(pool, 'the acknowledgement', 'select acknowledged_at from node_credentials where id = $1', [fresh.credentialId],
    (r: { acknowledged_at: Date | null }) => r.acknowledged_at !== null);
});
