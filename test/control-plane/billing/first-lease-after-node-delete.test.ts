/**
 * A node's FIRST lease of an account, topped up by one control-plane replica's session while
 * another replica deletes the node. The deletion locks only the accounts the node already holds a
 * lease of, so the account lock alone does not order the two: the top-up takes the node's row
 * (shared) before the account, as the deletion takes it (for update) before its accounts. Either
 * the deletion waits and then returns the lease the top-up opened, or the top-up waits and finds
 * the node deleted; no lease of the deleted node is left holding the account's credit.
 * Two pools stand for the replicas; a row lock on another node's empty lease of the account pauses
 * the top-up inside its transaction, long enough for the deletion to be attempted.
 */
import t from 'tap';
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

t.test("a node's first lease of an account, topped up while another replica deletes the node, is returned by the deletion", async (t) => {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);
  const replicaA = testPool(t, db.url);
  const replicaB = testPool(t, db.url);
  const account = await insertAccount(pool);
  await creditAccount(pool, account, 1_000_000n, null);
  const nodeId = await insertNode(pool, 'doomed');
  const other = await insertNode(pool, 'survivor');
  // Another node's lease row of the account, holding nothing (granted 0).
  const { rows: [closed] } = await pool.query<{ id: string }>(
    "insert into credit_leases (node_id, account_id, expires_at) values ($1, $2, now() + interval '1 hour') returning id", [other, account]);

  const blocker = await pool.connect();
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
  t.ok((await accountsToLease(pool, third)).includes(account), 'a live node is offered the account');
});
