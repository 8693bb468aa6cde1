/**
 * A lease top-up by one control-plane replica's session of a node, racing the node's deletion on
 * another replica (two pools stand for the replicas; row locks make each interleaving
 * deterministic). No lease of the deleted node may be left holding the account's credit (all of
 * it with ZENOVA_LEASE_SHARE=1), whether the top-up comes after the deletion committed, or the node
 * had no lease of the account yet and the deletion would have locked nothing the top-up needs: the
 * top-up takes the node's row (shared) before the account, as the deletion takes it before its
 * accounts.
 */
import type pg from 'pg';
import t from 'tap';
import type { Test } from 'tap';
import { creditAccount } from '../../../control-plane/src/billing/account-credits.js';
import { accountsToLease, topUpLease } from '../../../control-plane/src/billing/credit-leases.js';
import type { LeasePolicy } from '../../../control-plane/src/billing/lease-policy.js';
import { deleteNode } from '../../../control-plane/src/nodes/node-admin.js';
import { withTransaction } from '../../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { migratedPool, testPool } from '../gateway-harness.js';
import { insertAccount, insertNode, storedBalance } from './billing-fixtures.js';

const HOUR = 3_600_000;
const POLICY: LeasePolicy = { capMicros: 1_000_000_000_000n, sharePpm: 1_000_000n, ttlMs: HOUR, refreshMs: 1_000 };

/** Two replicas' pools on one database; an account with 1 000 000 µ and two nodes, 'doomed' and 'survivor'. */
async function twoReplicas(t: Test): Promise<{ pool: pg.Pool; replicaA: pg.Pool; replicaB: pg.Pool; account: string; nodeId: string; other: string }> {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);
  const replicaA = testPool(t, db.url);
  const replicaB = testPool(t, db.url);
  const account = await insertAccount(pool);
  await creditAccount(pool, account, 1_000_000n, null);
  const nodeId = await insertNode(pool, 'doomed');
  const other = await insertNode(pool, 'survivor');
  return { pool, replicaA, replicaB, account, nodeId, other };
}

t.test('a lease top-up that waited for a node deletion on another replica opens no lease for the deleted node', async (t) => {
  const { pool, replicaA, replicaB, account, nodeId, other } = await twoReplicas(t);
  const first = await withTransaction(replicaA, (c) => topUpLease(c, nodeId, account, POLICY, Date.now()));
  t.equal(first.addedMicros, 1_000_000n, 'the node holds a lease of the whole balance');

  // Something else briefly holds the account's balance row (any settlement or top-up does), so the
  // deletion (B) queues on it first and the session's refresh (A) right behind it.
  const blocker = await pool.connect();
  // A wait below that times out must not leave the client checked out: pool.end() would never settle.
  let released = false;
  t.teardown(() => { if (!released) blocker.release(true); });
  await blocker.query('begin');
  await blocker.query('select 1 from account_balances where account_id = $1 for update', [account]);
  const waiting = async (n: number) => {
    const { rows } = await pool.query<{ n: string }>("select count(*)::text as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'");
    return Number(rows[0]!.n) >= n;
  };
  const deletion = deleteNode(replicaB, 'doomed');
  await waitFor(() => waiting(1), { what: 'the deletion to wait on the balance lock' });
  const refresh = withTransaction(replicaA, (c) => topUpLease(c, nodeId, account, POLICY, Date.now()));
  await waitFor(() => waiting(2), { what: 'the refresh to wait behind it' });
  await blocker.query('commit');
  released = true;
  blocker.release();
  await deletion;
  const late = await refresh;

  t.equal(late.addedMicros, 0n, 'the late top-up grants nothing');
  t.equal(late.lease, undefined, 'and names no lease');
  const { rows: open } = await pool.query<{ n: number }>("select count(*)::int as n from credit_leases where node_id = $1 and state = 'open'", [nodeId]);
  t.equal(open[0]!.n, 0, 'the deleted node has no open lease');
  t.equal((await storedBalance(pool, account)).outstanding, 0n, 'none of the balance is held for it');
  t.ok((await accountsToLease(pool, other, Date.now(), 3_600_000)).includes(account), "another node can lease the account's credit");
  const healed = await withTransaction(replicaA, (c) => topUpLease(c, other, account, POLICY, Date.now()));
  t.equal(healed.addedMicros, 1_000_000n, 'and gets all of it');
});

t.test("a node's first lease of an account, topped up while another replica deletes the node, is returned by the deletion", async (t) => {
  const { pool, replicaA, replicaB, account, nodeId, other } = await twoReplicas(t);
  // Another node's lease row of the account, holding nothing (granted 0).
  const { rows: [closed] } = await pool.query<{ id: string }>(
    "insert into credit_leases (node_id, account_id, expires_at) values ($1, $2, now() + interval '1 hour') returning id", [other, account]);

  const blocker = await pool.connect();
  // A wait below that times out must not leave the client checked out: pool.end() would never settle.
  let released = false;
  t.teardown(() => { if (!released) blocker.release(true); });
  await blocker.query('begin');
  await blocker.query('select 1 from credit_leases where id = $1 for update', [closed!.id]);
  const waiting = async (n: number) => {
    const { rows } = await pool.query<{ n: string }>("select count(*)::text as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'");
    return Number(rows[0]!.n) >= n;
  };
  // Replica A's session of 'doomed' tops up: balance locked, node read as live, then paused.
  const topUp = withTransaction(replicaA, (c) => topUpLease(c, nodeId, account, POLICY, Date.now()));
  await waitFor(() => waiting(1), { what: 'the top-up to pass its liveness read' });
  // Replica B deletes the node meanwhile: it waits for the top-up, which holds the node's row.
  const deletion = deleteNode(replicaB, 'doomed');
  await waitFor(() => waiting(2), { what: 'the deletion to wait for the top-up' });
  await blocker.query('commit');
  released = true;
  blocker.release();
  await topUp;
  await deletion;

  const { rows: open } = await pool.query<{ n: number; granted: string }>(
    "select count(*)::int as n, coalesce(sum(granted_micros), 0)::text as granted from credit_leases where node_id = $1 and state = 'open'", [nodeId]);
  const { rows: node } = await pool.query<{ deleted: boolean }>('select deleted_at is not null as deleted from nodes where id = $1', [nodeId]);
  t.ok(node[0]!.deleted, 'the node is deleted');
  t.equal(open[0]!.n, 0, 'the deleted node has no open lease');
  t.equal((await storedBalance(pool, account)).outstanding, 0n, 'none of the balance is held for it');
  const third = await insertNode(pool, 'third');
  t.ok((await accountsToLease(pool, third, Date.now(), 3_600_000)).includes(account), 'a live node is offered the account');
});
