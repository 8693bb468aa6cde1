/**
 * A node's record batch against the node's deletion. The deletion hands back the credit its leases
 * hold beyond the spend settled so far, and that credit can be leased to another node at once: a
 * record of the deleted node charged after it pushes the account's leases past its balance. So a
 * batch under way when the node is deleted is settled first (the deletion waits for it and returns
 * the lease with its spend), and a batch that comes after is refused whole — nothing stored or
 * charged, no ack (the node keeps its records), the session ended with NODE_DELETED. Two pools
 * stand for two replicas; row locks make each interleaving deterministic.
 */
import type pg from 'pg';
import t from 'tap';
import type { Test } from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { creditAccount } from '../../../control-plane/src/billing/account-credits.js';
import { topUpLease } from '../../../control-plane/src/billing/credit-leases.js';
import type { LeasePolicy } from '../../../control-plane/src/billing/lease-policy.js';
import { checkLeaseInvariant } from '../../../control-plane/src/billing/ledger-replay.js';
import { deleteNode } from '../../../control-plane/src/nodes/node-admin.js';
import { NodeDeletedError } from '../../../control-plane/src/nodes/node-repository.js';
import { withTransaction } from '../../../control-plane/src/nodes/with-transaction.js';
import { ingestRecords } from '../../../control-plane/src/records/record-ingestion.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { record } from '../../edge-node/spool/spool-helpers.js';
import {
  enrolledNode,
  gatewayIdentity,
  gatewaySettings,
  liveSession,
  migratedPool,
  refusalOf,
  startTestGateway,
  testPool,
} from '../gateway-harness.js';
import { insertAccount, insertNode, storedBalance } from './billing-fixtures.js';

const HOUR = 3_600_000;
/** A lease of all the account's free credit. */
const GREEDY: LeasePolicy = { capMicros: 1_000_000_000_000n, sharePpm: 1_000_000n, ttlMs: HOUR, refreshMs: 1_000 };
/** A lease of half of it. */
const HALF: LeasePolicy = { ...GREEDY, sharePpm: 500_000n };

// One database for the billing scenes, each with its own account and nodes (the gateway's test has its own).
const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const replicaA = testPool(t, db.url);
const replicaB = testPool(t, db.url);

interface Scene {
  pool: pg.Pool;
  replicaA: pg.Pool;
  replicaB: pg.Pool;
  account: string;
  /** The node to be deleted, holding a lease of 500 of the account's 1 000 µ. */
  node: { nodeId: string; nodeName: string };
  leaseId: string;
  /** Another node. */
  other: string;
}

let scenes = 0;

async function scene(t: Test): Promise<Scene> {
  scenes += 1;
  const account = await insertAccount(pool);
  await creditAccount(pool, account, 1_000n, null);
  const node = { nodeId: await insertNode(pool, `doomed-${scenes}`), nodeName: `doomed-${scenes}` };
  const other = await insertNode(pool, `survivor-${scenes}`);
  const lease = await withTransaction(pool, (c) => topUpLease(c, node.nodeId, account, HALF, Date.now()));
  t.equal(lease.addedMicros, 500n, 'the doomed node leases half the balance');
  return { pool, replicaA, replicaB, account, node, leaseId: lease.lease!.id, other };
}

/** A record of `cost` µ the node spent from its lease. */
function spent(s: Scene, requestId: string, cost: number): RequestRecord {
  const now = Date.now();
  return record(requestId, {
    nodeId: s.node.nodeId, accountId: s.account, receivedAt: now - 1_000, finishedAt: now - 500,
    cost: { reservedMicros: cost, costMicros: cost, leaseId: s.leaseId, priced: true },
  });
}

/** The scene's account if its leases hold more than its balance (checkLeaseInvariant). */
async function overcommitted(s: Scene): Promise<unknown[]> {
  return (await checkLeaseInvariant(s.pool)).filter((a) => a.accountId === s.account);
}

async function storedRecords(pool: pg.Pool, nodeId: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>('select count(*)::int as n from request_records where node_id = $1', [nodeId]);
  return rows[0]!.n;
}

/** Holds the account's balance row (as any settlement or top-up does) until released. */
async function holdBalance(t: Test, pool: pg.Pool, account: string): Promise<() => Promise<void>> {
  const blocker = await pool.connect();
  // A wait that times out before the release must not leave the client checked out: pool.end() would never settle.
  let released = false;
  t.teardown(() => { if (!released) blocker.release(true); });
  await blocker.query('begin');
  await blocker.query('select 1 from account_balances where account_id = $1 for update', [account]);
  return async () => {
    await blocker.query('commit');
    released = true;
    blocker.release();
  };
}

/** Until at least `n` of the database's sessions wait on a lock. */
function lockWaiters(pool: pg.Pool, n: number, what: string): Promise<true> {
  return waitFor(async () => {
    const { rows } = await pool.query<{ n: number }>("select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'");
    return rows[0]!.n >= n ? true : undefined;
  }, { what });
}

t.test("a deleted node's late records are refused, so the credit its deletion returned and another node leased is not spent twice", async (t) => {
  const s = await scene(t);
  // The node spent 400 µ; the batch is still on its way when the node is deleted.
  const late = [spent(s, 'late-1', 400)];
  await deleteNode(s.pool, s.node.nodeName);
  const survivor = await withTransaction(s.pool, (c) => topUpLease(c, s.other, s.account, GREEDY, Date.now()));
  t.equal(survivor.addedMicros, 1_000n, 'the survivor leases the whole balance, the returned 500 µ too');

  await t.rejects(ingestRecords(s.replicaA, s.node, late), NodeDeletedError, 'the late batch is refused');
  t.equal(await storedRecords(s.pool, s.node.nodeId), 0, 'nothing of it is stored');
  t.same(await storedBalance(s.pool, s.account), { balance: 1_000n, outstanding: 1_000n, spent: 0n }, 'nor charged');
  t.same(await overcommitted(s), [], "the account's leases hold no more than its balance");
});

t.test('a batch under way when its node is deleted is settled before the deletion returns the lease', async (t) => {
  const s = await scene(t);
  const release = await holdBalance(t, s.pool, s.account);
  // Replica A ingests: the node's row taken, the record inserted, settlement waiting on the balance.
  const ingestion = ingestRecords(s.replicaA, s.node, [spent(s, 'inflight-1', 400)]);
  await lockWaiters(s.pool, 1, 'the ingestion to wait on the balance');
  // Replica B deletes the node meanwhile: it waits for the ingestion, which holds the node's row.
  const deletion = deleteNode(s.replicaB, s.node.nodeName);
  await lockWaiters(s.pool, 2, 'the deletion to wait behind it');
  await release();
  t.match(await ingestion, { accepted: 1 }, 'the batch is stored');
  await deletion;

  t.equal(await storedRecords(s.pool, s.node.nodeId), 1);
  const { rows: [lease] } = await s.pool.query<{ state: string; spent: string; returned: string }>(
    'select state, spent_micros::text as spent, returned_micros::text as returned from credit_leases where id = $1', [s.leaseId]);
  t.same(lease, { state: 'returned', spent: '400', returned: '100' }, 'the lease was returned with the batch settled');
  t.same(await storedBalance(s.pool, s.account), { balance: 600n, outstanding: 0n, spent: 400n }, 'charged once, nothing left outstanding');
  const survivor = await withTransaction(s.pool, (c) => topUpLease(c, s.other, s.account, GREEDY, Date.now()));
  t.equal(survivor.addedMicros, 600n, 'the survivor leases what is left');
  t.same(await overcommitted(s), [], "the account's leases hold no more than its balance");
});

t.test('a batch that reaches the control plane while its node is being deleted waits for the deletion and is refused', async (t) => {
  const s = await scene(t);
  const release = await holdBalance(t, s.pool, s.account);
  // Replica B deletes: the node marked deleted, returning its lease waiting on the balance.
  const deletion = deleteNode(s.replicaB, s.node.nodeName);
  await lockWaiters(s.pool, 1, 'the deletion to wait on the balance');
  // The refusal is expected from the start: the ingestion may settle before `deletion` resolves here.
  const refused = t.rejects(ingestRecords(s.replicaA, s.node, [spent(s, 'during-1', 400)]), NodeDeletedError, 'the batch is refused');
  await lockWaiters(s.pool, 2, 'the ingestion to wait behind it');
  await release();
  await deletion;
  await refused;

  t.equal(await storedRecords(s.pool, s.node.nodeId), 0, 'nothing of it is stored');
  t.same(await storedBalance(s.pool, s.account), { balance: 1_000n, outstanding: 0n, spent: 0n }, 'nor charged: the lease went back whole');
  const survivor = await withTransaction(s.pool, (c) => topUpLease(c, s.other, s.account, GREEDY, Date.now()));
  t.equal(survivor.addedMicros, 1_000n);
  t.same(await overcommitted(s), [], "the account's leases hold no more than its balance");
});

t.test("a record batch from a node deleted before the deletion's event reached its session is not acked and ends the session with NODE_DELETED", async (t) => {
  const gatewayDb = await testDatabase(t);
  const pool = await migratedPool(t, gatewayDb.url);
  const identity = await gatewayIdentity();
  const settings = gatewaySettings(gatewayDb.url);
  const gateway = await startTestGateway(t, { pool, settings, identity });
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  // Marked deleted without the event (NOTIFY) that would end the session first: as when the
  // deletion commits while the batch is on its way.
  await pool.query('update nodes set deleted_at = now() where id = $1', [node.id]);
  const late = record('late-on-stream', { nodeId: node.id, receivedAt: Date.now() - 1_000, finishedAt: Date.now() - 500 });
  conn.send({ recordBatch: { batchId: 'b-1', records: [{ requestId: late.requestId, recordJson: Buffer.from(JSON.stringify(late)) }], firstSequence: 1n, lastSequence: 1n } });

  const refusal = await refusalOf(conn, 'the batch of the deleted node');
  t.equal(refusal.code, 'NODE_DELETED');
  t.notOk(conn.received.some((m) => m.recordBatchAck !== undefined), 'no ack: the node keeps its records');
  t.equal(await storedRecords(pool, node.id), 0, 'nothing stored');
});
