/**
 * A node deleted on one control-plane replica while another replica's live session of that node
 * tops up its lease (a refresh, a LeaseReport or the grant on hello): the top-up waits on the
 * account's balance lock the deletion holds, then runs after the deletion committed. It must open
 * no new lease for the deleted node: that would hold the account's free credit (all of it with
 * ZENOVA_LEASE_SHARE=1) for a node that will never bill a request. Two pools stand for the replicas;
 * the interleaving is made deterministic by holding the balance row first.
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

t.test('a lease top-up that waited for a node deletion on another replica opens no lease for the deleted node', async (t) => {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);
  const replicaA = testPool(t, db.url);
  const replicaB = testPool(t, db.url);
  const account = await insertAccount(pool);
  await creditAccount(pool, account, 1_000_000n, null);
  const nodeId = await insertNode(pool, 'doomed');
  const other = await insertNode(pool, 'survivor');
  const first = await withTransaction(replicaA, (c) => topUpLease(c, nodeId, account, POLICY, Date.now()));
  t.equal(first.addedMicros, 1_000_000n, 'the node holds a lease of the whole balance');

  // Something else briefly holds the account's balance row (any settlement or top-up does), so the
  // deletion (B) queues on it first and the session's refresh (A) right behind it.
  const blocker = await pool.connect();
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
  blocker.release();
  await deletion;
  const late = await refresh;

  t.equal(late.addedMicros, 0n, 'the late top-up grants nothing');
  t.equal(late.lease, undefined, 'and names no lease');
  const { rows: open } = await pool.query<{ n: number }>("select count(*)::int as n from credit_leases where node_id = $1 and state = 'open'", [nodeId]);
  t.equal(open[0]!.n, 0, 'the deleted node has no open lease');
  t.equal((await storedBalance(pool, account)).outstanding, 0n, 'none of the balance is held for it');
  t.ok((await accountsToLease(pool, other)).includes(account), "another node can lease the account's credit");
  const healed = await withTransaction(replicaA, (c) => topUpLease(c, other, account, POLICY, Date.now()));
  t.equal(healed.addedMicros, 1_000_000n, 'and gets all of it');
});
