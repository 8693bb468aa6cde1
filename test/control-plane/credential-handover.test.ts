// The handover window at the credentials layer (real PostgreSQL, times passed in, never waited for):
// a rotation shortens nothing, an acknowledgement bounds the node's older live credentials and
// nothing else, and an acknowledgement of a revoked credential starts no window.
import t from 'tap';
import { acknowledgeCredential, issueCredential, rotateCredential, verifyCredential } from '../../control-plane/src/nodes/credentials.js';
import type { CredentialTimings } from '../../control-plane/src/nodes/credentials.js';
import { createNode } from '../../control-plane/src/nodes/node-admin.js';
import { nodeCreateSchema } from '../../control-plane/src/nodes/node-validation.js';
import { testDatabase } from '../fixtures/postgres.js';
import { migratedPool, uniqueName } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const timings: CredentialTimings = { validityMs: 30 * DAY, rotateAfterMs: DAY, handoverMs: HOUR };
const T0 = new Date('2030-01-01T00:00:00Z');
const at = (ms: number): Date => new Date(T0.getTime() + ms);

async function newNode(): Promise<{ id: string }> {
  const input = nodeCreateSchema.parse({ name: uniqueName('handover'), surfaces: ['model'], address: 'edge.example.com', controlPlaneUrl: 'https://cp.example.com' });
  return (await createNode(pool, input, DAY)).node;
}

async function validUntil(id: string): Promise<Date | null> {
  const { rows } = await pool.query<{ valid_until: Date | null }>('select valid_until from node_credentials where id = $1', [id]);
  return rows[0]!.valid_until;
}

t.test('a rotation whose reply is lost leaves the old credential working two hours later, and a retry revokes the lost successor', async (t) => {
  const node = await newNode();
  const old = await issueCredential(pool, node.id, timings, T0);
  const lost = await rotateCredential(pool, node.id, old.credentialId, timings, at(DAY));
  t.equal(await validUntil(old.credentialId), null, 'issuing a successor does not shorten the presented credential');
  t.match(await verifyCredential(pool, node.id, old.credential, at(DAY + 2 * HOUR)), { ok: true, isNewest: false });
  const fresh = await rotateCredential(pool, node.id, old.credentialId, timings, at(DAY + 2 * HOUR));
  t.match(await verifyCredential(pool, node.id, lost.credential, at(DAY + 2 * HOUR)), { ok: false, code: 'CREDENTIAL_REVOKED' });
  await acknowledgeCredential(pool, node.id, fresh.credentialId, timings, at(DAY + 2 * HOUR + 1));
  t.same(await validUntil(old.credentialId), at(DAY + 3 * HOUR + 1), 'the window starts with the acknowledgement');
});

t.test('an acknowledgement bounds every older live credential of the node, never later than it already ends', async (t) => {
  const node = await newNode();
  const other = await newNode();
  const a = await issueCredential(pool, node.id, timings, T0);
  const b = await rotateCredential(pool, node.id, a.credentialId, timings, at(DAY));
  await acknowledgeCredential(pool, node.id, b.credentialId, timings, at(DAY + 1));
  t.same(await validUntil(a.credentialId), at(DAY + 1 + HOUR));
  const c = await rotateCredential(pool, node.id, b.credentialId, timings, at(DAY + 30 * 60_000));
  const foreign = await issueCredential(pool, other.id, timings, T0);
  await acknowledgeCredential(pool, node.id, c.credentialId, timings, at(DAY + 50 * 60_000));
  t.same(await validUntil(a.credentialId), at(DAY + 1 + HOUR), 'a shorter window is kept, not extended');
  t.same(await validUntil(b.credentialId), at(DAY + 50 * 60_000 + HOUR), 'the direct predecessor gets one window from the ack');
  t.equal(await validUntil(c.credentialId), null, 'the acknowledged credential itself is untouched');
  t.equal(await validUntil(foreign.credentialId), null, "another node's credentials are untouched");
});

t.test('acknowledging a revoked credential records nothing and starts no window', async (t) => {
  const node = await newNode();
  const old = await issueCredential(pool, node.id, timings, T0);
  const lost = await rotateCredential(pool, node.id, old.credentialId, timings, at(DAY));
  await rotateCredential(pool, node.id, old.credentialId, timings, at(DAY + HOUR)); // revokes `lost`
  await acknowledgeCredential(pool, node.id, lost.credentialId, timings, at(DAY + 2 * HOUR));
  t.equal(await validUntil(old.credentialId), null);
  const { rows } = await pool.query<{ acknowledged_at: Date | null }>('select acknowledged_at from node_credentials where id = $1', [lost.credentialId]);
  t.equal(rows[0]!.acknowledged_at, null);
});
