/**
 * Node credentials against real PostgreSQL: issue and verify, each refusal code, rotation with its
 * handover window from the acknowledgement (driven by the `now` parameters, never by waiting),
 * revocation of unacknowledged successors, and deleted nodes. More on the window: credential-handover.test.ts.
 */
import { createHash, randomUUID } from 'node:crypto';
import t from 'tap';
import {
  acknowledgeCredential, issueCredential, revokeNodeCredentials, rotateCredential, verifyCredential,
} from '../../control-plane/src/nodes/credentials.js';
import type { CredentialTimings } from '../../control-plane/src/nodes/credentials.js';
import { createNode, deleteNode } from '../../control-plane/src/nodes/node-admin.js';
import { nodeCreateSchema } from '../../control-plane/src/nodes/node-validation.js';
import { withTransaction } from '../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { listenNodeEvents, migratedPool, uniqueName } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const timings: CredentialTimings = { validityMs: 30 * DAY, rotateAfterMs: DAY, handoverMs: HOUR };
const T0 = new Date('2030-01-01T00:00:00Z');
const at = (ms: number): Date => new Date(T0.getTime() + ms);

async function newNode(): Promise<{ id: string; name: string }> {
  const input = nodeCreateSchema.parse({ name: uniqueName('cred'), surfaces: ['model'], address: 'edge.example.com', controlPlaneUrl: 'https://cp.example.com' });
  const { node } = await createNode(pool, input, DAY);
  return node;
}

t.test('an issued credential verifies, and only the hash of its secret is stored', async (t) => {
  const node = await newNode();
  const issued = await issueCredential(pool, node.id, timings, T0);
  t.match(issued.credential, new RegExp(`^${issued.credentialId}\\.[A-Za-z0-9_-]{43}$`));
  t.equal(issued.expiresAt.getTime(), T0.getTime() + timings.validityMs);
  const check = await verifyCredential(pool, node.id, issued.credential, at(HOUR));
  t.same(check, {
    ok: true, credentialId: issued.credentialId, nodeId: node.id, nodeName: node.name, issuedAt: T0, isNewest: true, acknowledged: false,
    validity: { expiresAt: issued.expiresAt, validUntil: null },
  });
  const secret = issued.credential.split('.')[1]!;
  const { rows } = await pool.query<{ row: string; hash: Buffer }>('select row_to_json(c)::text as row, secret_hash as hash from node_credentials c where id = $1', [issued.credentialId]);
  t.notOk(rows[0]!.row.includes(secret), 'the secret text is not stored');
  t.equal(rows[0]!.hash.toString('hex'), createHash('sha256').update(secret).digest('hex'), 'its SHA-256 is');
});

t.test('a missing node id or credential is CREDENTIAL_MISSING', async (t) => {
  const node = await newNode();
  const issued = await issueCredential(pool, node.id, timings, T0);
  for (const [nodeId, presented] of [[undefined, issued.credential], [node.id, undefined], ['', ''], [undefined, undefined]] as const) {
    const check = await verifyCredential(pool, nodeId, presented, at(1));
    t.match(check, { ok: false, code: 'CREDENTIAL_MISSING', message: /Enroll the node/ });
  }
});

t.test('a wrong secret, an unknown id, a malformed string or another node\'s id is CREDENTIAL_INVALID', async (t) => {
  const node = await newNode();
  const other = await newNode();
  const issued = await issueCredential(pool, node.id, timings, T0);
  const [id, secret] = issued.credential.split('.') as [string, string];
  const flipped = `${secret.slice(0, -1)}${secret.endsWith('A') ? 'B' : 'A'}`;
  const cases: Array<[string, string, string]> = [
    ['wrong secret', node.id, `${id}.${flipped}`],
    ['unknown id', node.id, `${randomUUID()}.${secret}`],
    ['malformed', node.id, 'garbage'],
    ['secret too short', node.id, `${id}.${secret.slice(1)}`],
    ['another node', other.id, issued.credential],
    ['node id not a uuid', 'node-1', issued.credential],
  ];
  for (const [what, nodeId, presented] of cases) {
    const check = await verifyCredential(pool, nodeId, presented, at(1));
    t.match(check, { ok: false, code: 'CREDENTIAL_INVALID', message: /reenroll-command/ }, what);
  }
  t.match(await verifyCredential(pool, node.id.toUpperCase(), issued.credential, at(1)), { ok: true }, 'uuid case does not matter');
});

t.test('past its validity a credential is CREDENTIAL_EXPIRED, with the re-enroll advice', async (t) => {
  const node = await newNode();
  const issued = await issueCredential(pool, node.id, timings, T0);
  t.match(await verifyCredential(pool, node.id, issued.credential, at(timings.validityMs - 1)), { ok: true });
  const check = await verifyCredential(pool, node.id, issued.credential, at(timings.validityMs));
  t.match(check, { ok: false, code: 'CREDENTIAL_EXPIRED', message: /expired.*zenova gateway-node reenroll-command NAME.*zenova install node … --reenroll.*zenova-node enroll --reenroll --token-file/ });
});

t.test('revoked credentials are CREDENTIAL_REVOKED, and revocation tells every replica', async (t) => {
  const listener = await listenNodeEvents(t, db.url);
  const node = await newNode();
  const a = await issueCredential(pool, node.id, timings, T0);
  const b = await issueCredential(pool, node.id, timings, at(1));
  await withTransaction(pool, (client) => revokeNodeCredentials(client, node.id));
  for (const c of [a, b]) t.match(await verifyCredential(pool, node.id, c.credential, at(2)), { ok: false, code: 'CREDENTIAL_REVOKED' });
  const event = await waitFor(() => listener.events.find((e) => e.nodeId === node.id), { what: 'credentials-revoked', timeoutMs: 10_000 });
  t.same(event, { type: 'credentials-revoked', nodeId: node.id });
});

t.test('after a rotation the old credential works until one handover window after the acknowledgement, then is SUPERSEDED', async (t) => {
  const node = await newNode();
  const old = await issueCredential(pool, node.id, timings, T0);
  const t1 = at(DAY);
  const next = await rotateCredential(pool, node.id, old.credentialId, timings, t1);
  t.equal(next.previousValidUntil.getTime(), t1.getTime() + timings.handoverMs, 'the earliest the old one can stop: an ack at once');
  t.equal(next.expiresAt.getTime(), t1.getTime() + timings.validityMs, 'the successor gets a full validity');
  t.not(next.credentialId, old.credentialId);
  t.match(await verifyCredential(pool, node.id, next.credential, t1), { ok: true, isNewest: true, acknowledged: false });
  const acked = at(DAY + 3 * HOUR);
  t.match(await verifyCredential(pool, node.id, old.credential, acked),
    { ok: true, isNewest: false }, 'not acknowledged yet: still accepted, and known not to be the newest');
  await acknowledgeCredential(pool, node.id, next.credentialId, timings, acked);
  t.match(await verifyCredential(pool, node.id, old.credential, new Date(acked.getTime() + timings.handoverMs - 1)), { ok: true });
  const after = await verifyCredential(pool, node.id, old.credential, new Date(acked.getTime() + timings.handoverMs));
  t.match(after, { ok: false, code: 'CREDENTIAL_SUPERSEDED', message: /handover window/ });
  t.match(await verifyCredential(pool, node.id, next.credential, new Date(acked.getTime() + timings.handoverMs)), { ok: true, acknowledged: true });
});

t.test('a second rotation from the old credential revokes the unacknowledged successor and neither shortens nor extends the old one', async (t) => {
  const node = await newNode();
  const old = await issueCredential(pool, node.id, timings, T0);
  const first = await rotateCredential(pool, node.id, old.credentialId, timings, at(DAY));
  // The rotation reply was lost: the node comes back with the old credential and is rotated again.
  const second = await rotateCredential(pool, node.id, old.credentialId, timings, at(DAY + 10 * 60_000));
  t.match(await verifyCredential(pool, node.id, first.credential, at(DAY + 11 * 60_000)), { ok: false, code: 'CREDENTIAL_REVOKED' },
    'the successor the node never acknowledged is revoked');
  t.match(await verifyCredential(pool, node.id, second.credential, at(DAY + 11 * 60_000)), { ok: true, isNewest: true });
  const { rows } = await pool.query<{ valid_until: Date | null }>('select valid_until from node_credentials where id = $1', [old.credentialId]);
  t.equal(rows[0]!.valid_until, null, 'unacknowledged successors leave the old credential as it was');
  t.match(await verifyCredential(pool, node.id, old.credential, at(timings.validityMs - 1)), { ok: true }, 'it works to its own expiry');
  t.match(await verifyCredential(pool, node.id, old.credential, at(timings.validityMs)), { ok: false, code: 'CREDENTIAL_EXPIRED' },
    'and no longer: a node that keeps losing replies gains nothing');
});

t.test('an acknowledged successor survives a later rotation from the older credential', async (t) => {
  const node = await newNode();
  const old = await issueCredential(pool, node.id, timings, T0);
  const next = await rotateCredential(pool, node.id, old.credentialId, timings, at(DAY));
  await acknowledgeCredential(pool, node.id, next.credentialId, timings, at(DAY + 1));
  const { rows } = await pool.query<{ acknowledged_at: Date }>('select acknowledged_at from node_credentials where id = $1', [next.credentialId]);
  t.same(rows[0]!.acknowledged_at, at(DAY + 1));
  await acknowledgeCredential(pool, node.id, next.credentialId, timings, at(DAY + 2));
  const again = await pool.query<{ acknowledged_at: Date }>('select acknowledged_at from node_credentials where id = $1', [next.credentialId]);
  t.same(again.rows[0]!.acknowledged_at, at(DAY + 1), 'the first acknowledgement is kept');
  await rotateCredential(pool, node.id, old.credentialId, timings, at(DAY + 2));
  t.match(await verifyCredential(pool, node.id, next.credential, at(DAY + 3)), { ok: true });
});

t.test('the handover window never outlives the old credential\'s expiry', async (t) => {
  const node = await newNode();
  const old = await issueCredential(pool, node.id, timings, T0);
  const nearEnd = at(timings.validityMs - 60_000);
  const next = await rotateCredential(pool, node.id, old.credentialId, timings, nearEnd);
  t.equal(next.previousValidUntil.getTime(), old.expiresAt.getTime());
  await acknowledgeCredential(pool, node.id, next.credentialId, timings, nearEnd);
  const { rows } = await pool.query<{ valid_until: Date }>('select valid_until from node_credentials where id = $1', [old.credentialId]);
  t.same(rows[0]!.valid_until, old.expiresAt, 'an acknowledgement near the end bounds it by its expiry');
});

t.test('rotating from a revoked or foreign credential is refused', async (t) => {
  const node = await newNode();
  const other = await newNode();
  const mine = await issueCredential(pool, node.id, timings, T0);
  await t.rejects(rotateCredential(pool, other.id, mine.credentialId, timings, at(1)), /not a live credential/);
  await withTransaction(pool, (client) => revokeNodeCredentials(client, node.id));
  await t.rejects(rotateCredential(pool, node.id, mine.credentialId, timings, at(1)), /not a live credential/);
});

t.test('credentials of a deleted node are NODE_DELETED; a wrong secret still reveals nothing', async (t) => {
  const node = await newNode();
  const issued = await issueCredential(pool, node.id, timings, T0);
  await deleteNode(pool, node.name);
  t.match(await verifyCredential(pool, node.id, issued.credential, at(1)), { ok: false, code: 'NODE_DELETED', message: /deleted on the control plane and cannot come back.*create a node.*reenroll-command NAME.*--reenroll.*zenova-node enroll --reenroll --token-file.*spool and config aside.*retired\// });
  const [id, secret] = issued.credential.split('.') as [string, string];
  const wrong = `${id}.${secret.startsWith('A') ? 'B' : 'A'}${secret.slice(1)}`;
  t.match(await verifyCredential(pool, node.id, wrong, at(1)), { ok: false, code: 'CREDENTIAL_INVALID' });
  await t.rejects(rotateCredential(pool, node.id, issued.credentialId, timings, at(1)), /deleted/);
});
