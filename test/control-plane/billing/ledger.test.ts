// The control plane's money on real PostgreSQL: concurrent lease grants never commit more than
// the balance, settlement charges each request exactly once, and the stored figures equal a
// replay of the ledger.
import t from 'tap';
import type pg from 'pg';
import type { RequestRecord } from '../../../proto/src/index.js';
import { creditAccount } from '../../../control-plane/src/billing/account-credits.js';
import { returnLease, returnLeasesOfNode, topUpLease } from '../../../control-plane/src/billing/credit-leases.js';
import { replayLedger } from '../../../control-plane/src/billing/ledger-replay.js';
import type { LeasePolicy } from '../../../control-plane/src/billing/lease-policy.js';
import { settleIngestedRecords } from '../../../control-plane/src/billing/settlement.js';
import { withTransaction } from '../../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { migratedPool } from '../nodes-harness.js';
import { insertAccount, insertNode, storedBalance } from './billing-fixtures.js';

const GREEDY: LeasePolicy = { capMicros: 1_000_000_000_000n, sharePpm: 1_000_000n, ttlMs: 3_600_000, refreshMs: 1_000 };
const HALF: LeasePolicy = { ...GREEDY, sharePpm: 500_000n, capMicros: 700n };

function record(requestId: string, accountId: string | null, costMicros: number, leaseId: string | null, nodeId: string): RequestRecord {
  return {
    schemaVersion: 1, requestId, nodeId, configVersion: 1, receivedAt: 1_700_000_000_000, finishedAt: 1_700_000_000_500,
    surface: 'model', api: 'chat.completions', keyId: 'key-1', accountId, model: 'm', upstream: 'u', upstreamModel: 'm', stream: false,
    status: 'ok', httpStatus: 200, errorCode: null, usage: { inputTokens: 1, outputTokens: 1, estimated: false },
    cost: { reservedMicros: costMicros, costMicros, leaseId, priced: true },
    timings: { totalMs: 1, upstreamFirstByteMs: 1, upstreamMs: 1, stagesUs: {} }, attempts: [], guardrails: [], bodies: null,
  };
}

async function outstandingSum(pool: pg.Pool, accountId: string): Promise<bigint> {
  const { rows } = await pool.query<{ s: string }>(
    'select coalesce(sum(granted_micros - spent_micros - returned_micros), 0)::text as s from credit_leases where account_id = $1',
    [accountId],
  );
  return BigInt(rows[0]!.s);
}

t.test('billing ledger', async (t) => {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);

  t.test('concurrent grants to many nodes never lease out more than the balance', async (t) => {
    const account = await insertAccount(pool);
    await creditAccount(pool, account, 10_000n, 'invoice-1');
    const nodes = await Promise.all(Array.from({ length: 8 }, () => insertNode(pool)));
    // Every node asks for everything, several times, all at once.
    const results = await Promise.all(
      nodes.flatMap((node) => [0, 1, 2].map(() => withTransaction(pool, (c) => topUpLease(c, node, account, GREEDY, Date.now())))),
    );
    const added = results.reduce((s, r) => s + r.addedMicros, 0n);
    t.equal(added, 10_000n, 'the whole balance is leased, not a micro more');
    t.equal(await outstandingSum(pool, account), 10_000n);
    t.equal((await storedBalance(pool, account)).outstanding, 10_000n);
    t.same(await replayLedger(pool), []);
  });

  t.test('a lease is topped up to min(cap, share × (free + held)) as the node reports spend', async (t) => {
    const account = await insertAccount(pool);
    const node = await insertNode(pool);
    await creditAccount(pool, account, 1_000n, null);
    const first = await withTransaction(pool, (c) => topUpLease(c, node, account, HALF, Date.now()));
    t.equal(first.addedMicros, 500n, 'half of 1000');
    // Spend 400 settled against the lease; the balance is 600, the lease holds 100.
    await withTransaction(pool, (c) => settleIngestedRecords(c, node, [record('topup-1', account, 400, first.lease!.id, node)]));
    const second = await withTransaction(pool, (c) => topUpLease(c, node, account, HALF, Date.now()));
    // free = 600 − 100 = 500; target = min(700, (500 + 100) / 2) = 300; node holds 100 → +200.
    t.equal(second.addedMicros, 200n);
    t.equal(second.lease!.granted, 700n, 'the grant carries the cumulative total');
    t.equal(second.lease!.id, first.lease!.id, 'the same lease is topped up');
    t.same(await replayLedger(pool), []);
  });

  t.test('a top-up under a shorter lease life keeps the expiry the node was granted, never moving it earlier', async (t) => {
    const account = await insertAccount(pool);
    const node = await insertNode(pool);
    await creditAccount(pool, account, 1_000n, null);
    const now = Date.now();
    const first = await withTransaction(pool, (c) => topUpLease(c, node, account, { ...HALF, ttlMs: 30 * 86_400_000 }, now));
    await withTransaction(pool, (c) => settleIngestedRecords(c, node, [record('ttl-1', account, 400, first.lease!.id, node)]));
    // The operator lowered the lease life to a day; the node's spend makes the next top-up worth it.
    const second = await withTransaction(pool, (c) => topUpLease(c, node, account, { ...HALF, ttlMs: 86_400_000 }, now + 1_000));
    t.ok(second.addedMicros > 0n, 'topped up');
    t.equal(second.lease!.id, first.lease!.id);
    t.equal(second.lease!.expiresAt, first.lease!.expiresAt, 'the granted 30 days stand');
    const { rows } = await pool.query<{ ms: string }>('select (extract(epoch from expires_at) * 1000)::bigint::text as ms from credit_leases where id = $1', [first.lease!.id]);
    t.equal(Number(rows[0]!.ms), first.lease!.expiresAt, 'and the stored lease says so too');
  });

  t.test('a suspended account gets no further credit', async (t) => {
    const account = await insertAccount(pool);
    const node = await insertNode(pool);
    await creditAccount(pool, account, 1_000n, null);
    await pool.query("update accounts set status = 'suspended' where id = $1", [account]);
    const r = await withTransaction(pool, (c) => topUpLease(c, node, account, GREEDY, Date.now()));
    t.equal(r.addedMicros, 0n);
  });

  t.test('the same record settled twice, even concurrently, is debited once', async (t) => {
    const account = await insertAccount(pool);
    const node = await insertNode(pool);
    await creditAccount(pool, account, 5_000n, null);
    const lease = (await withTransaction(pool, (c) => topUpLease(c, node, account, GREEDY, Date.now()))).lease!;
    const rec = record('dup-1', account, 1_234, lease.id, node);
    const results = await Promise.all([0, 1, 2, 3].map(() => withTransaction(pool, (c) => settleIngestedRecords(c, node, [rec]))));
    t.equal(results.reduce((s, r) => s + r.charged, 0), 1);
    t.equal(results.reduce((s, r) => s + r.duplicates, 0), 3);
    const again = await withTransaction(pool, (c) => settleIngestedRecords(c, node, [rec]));
    t.equal(again.charged, 0);
    const stored = await storedBalance(pool, account);
    t.equal(stored.balance, 5_000n - 1_234n);
    t.equal(stored.spent, 1_234n);
    t.equal(stored.outstanding, 5_000n - 1_234n, 'the lease spent it: its outstanding went down too');
    const { rows } = await pool.query("select count(*)::int as n from billing_ledger where request_id = 'dup-1'");
    t.equal(rows[0].n, 1);
  });

  t.test('records with no account, no cost, or an unknown account move no money', async (t) => {
    const node = await insertNode(pool);
    const r = await withTransaction(pool, (c) =>
      settleIngestedRecords(c, node, [
        record('free-1', null, 50, null, node),
        record('free-2', '00000000-0000-4000-8000-000000000000', 0, null, node),
        record('free-3', '00000000-0000-4000-8000-000000000000', 10, null, node),
        record('free-4', 'not-a-uuid', 10, null, node),
      ]),
    );
    t.same(r, { charged: 0, duplicates: 0, unknownAccount: 2, writtenOff: 0, released: 0, uncoveredMicros: 0n, withheldWriteOffMicros: 0n });
  });

  t.test('a returned lease gives back what the node did not spend; its unreported spend stays committed until the records arrive', async (t) => {
    const account = await insertAccount(pool);
    const node = await insertNode(pool);
    await creditAccount(pool, account, 1_000n, null);
    const lease = (await withTransaction(pool, (c) => topUpLease(c, node, account, GREEDY, Date.now()))).lease!;
    await withTransaction(pool, (c) => settleIngestedRecords(c, node, [record('ret-1', account, 100, lease.id, node)]));
    // The node spent 300 in all; 200 of it is still in its spool.
    const given = await withTransaction(pool, (c) => returnLease(c, node, account, lease.id, 300n));
    t.equal(given, 700n);
    t.equal(await withTransaction(pool, (c) => returnLease(c, node, account, lease.id, 300n)), undefined, 'a second return changes nothing');
    t.equal(await outstandingSum(pool, account), 200n);
    await withTransaction(pool, (c) => settleIngestedRecords(c, node, [record('ret-2', account, 200, lease.id, node)]));
    t.equal(await outstandingSum(pool, account), 0n);
    t.equal((await storedBalance(pool, account)).balance, 700n);
    t.same(await replayLedger(pool), []);
  });

  t.test('an interrupted request gives its uncharged reservation back once, and the lease return does not count it twice', async (t) => {
    const account = await insertAccount(pool);
    const node = await insertNode(pool);
    await creditAccount(pool, account, 1_000n, null);
    const lease = (await withTransaction(pool, (c) => topUpLease(c, node, account, GREEDY, Date.now()))).lease!;
    const interrupted = { ...record('int-1', account, 0, lease.id, node), status: 'interrupted' as const };
    interrupted.cost = { reservedMicros: 250, costMicros: 0, leaseId: lease.id, priced: false };
    const first = await withTransaction(pool, (c) => settleIngestedRecords(c, node, [interrupted]));
    const second = await withTransaction(pool, (c) => settleIngestedRecords(c, node, [interrupted]));
    t.equal(first.writtenOff + second.writtenOff, 1);
    t.equal(await outstandingSum(pool, account), 750n);
    // The restarted node counted the 250 as spent, plus 100 it really spent (record settled).
    await withTransaction(pool, (c) => settleIngestedRecords(c, node, [record('int-2', account, 100, lease.id, node)]));
    const given = await withTransaction(pool, (c) => returnLease(c, node, account, lease.id, 350n));
    t.equal(given, 650n);
    t.equal(await outstandingSum(pool, account), 0n);
    t.equal((await storedBalance(pool, account)).balance, 900n);
    t.same(await replayLedger(pool), []);
  });

  t.test('deleting a node returns the unspent part of its leases', async (t) => {
    const account = await insertAccount(pool);
    const node = await insertNode(pool);
    const other = await insertNode(pool);
    await creditAccount(pool, account, 1_000n, null);
    const lease = (await withTransaction(pool, (c) => topUpLease(c, node, account, HALF, Date.now()))).lease!;
    await withTransaction(pool, (c) => settleIngestedRecords(c, node, [record('del-1', account, 100, lease.id, node)]));
    await withTransaction(pool, (c) => returnLeasesOfNode(c, node));
    t.equal(await outstandingSum(pool, account), 0n);
    // A lease of a node deleted without that call is reclaimed the next time the account is leased.
    const l2 = (await withTransaction(pool, (c) => topUpLease(c, other, account, HALF, Date.now()))).lease!;
    await pool.query('update nodes set deleted_at = now() where id = $1', [other]);
    const third = await insertNode(pool);
    await withTransaction(pool, (c) => topUpLease(c, third, account, GREEDY, Date.now()));
    const { rows } = await pool.query<{ state: string }>('select state from credit_leases where id = $1', [l2.id]);
    t.equal(rows[0]!.state, 'returned');
    t.equal(await outstandingSum(pool, account), 900n, 'the third node holds all that is left');
    t.same(await replayLedger(pool), []);
  });

  t.test('the ledger is append-only', async (t) => {
    await t.rejects(pool.query('update billing_ledger set amount_micros = 1'), /append-only/);
    await t.rejects(pool.query('delete from billing_ledger'), /append-only/);
  });

  t.test('replaying the ledger after a random mix of operations gives the stored figures', async (t) => {
    const accounts = await Promise.all([0, 1, 2].map(() => insertAccount(pool)));
    const nodes = await Promise.all([0, 1, 2].map(() => insertNode(pool)));
    let seq = 0;
    let rnd = 42;
    const next = (n: number): number => {
      rnd = (rnd * 1_103_515_245 + 12_345) % 2_147_483_648;
      return rnd % n;
    };
    for (let i = 0; i < 120; i++) {
      const account = accounts[next(3)]!;
      const node = nodes[next(3)]!;
      const op = next(4);
      if (op === 0) await creditAccount(pool, account, BigInt(1 + next(10_000)), null);
      else if (op === 1) await withTransaction(pool, (c) => topUpLease(c, node, account, HALF, Date.now()));
      else if (op === 2) {
        const { rows } = await pool.query<{ id: string }>("select id from credit_leases where node_id = $1 and account_id = $2 order by created_at desc limit 1", [node, account]);
        const recs = Array.from({ length: 1 + next(4) }, () => record(`mix-${seq++ % 50}`, account, 1 + next(300), rows[0]?.id ?? null, node));
        await withTransaction(pool, (c) => settleIngestedRecords(c, node, recs));
      } else {
        const { rows } = await pool.query<{ id: string }>("select id from credit_leases where node_id = $1 and account_id = $2 and state = 'open'", [node, account]);
        if (rows[0]) await withTransaction(pool, (c) => returnLease(c, node, account, rows[0]!.id, BigInt(next(200))));
      }
    }
    t.same(await replayLedger(pool), []);
    for (const account of accounts) {
      const { balance, outstanding } = await storedBalance(pool, account);
      t.ok(outstanding <= balance || balance < 0n, 'outstanding leases within the balance');
    }
  });
});
