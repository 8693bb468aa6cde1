// Write-offs of interrupted requests on real PostgreSQL (docs/billing.md, "Persistence and crashes"):
// a node killed with a request open records it `interrupted` at restart, and the control plane
// returns the uncharged reservation — but never more than the record's lease still holds. A record
// delivered late (a node re-enrolled after being offline delivers its old spool, docs/spool.md)
// finds its closed lease already handed that credit back; returning it again left the lease
// returned beyond granted and the account's stored outstanding below what its leases hold, silently.
import t from 'tap';
import type pg from 'pg';
import { pino } from 'pino';
import type { RequestRecord } from '../../../proto/src/index.js';
import { creditAccount } from '../../../control-plane/src/billing/account-credits.js';
import { recordLeaseReport, returnLease, topUpLease } from '../../../control-plane/src/billing/credit-leases.js';
import type { LeasePolicy } from '../../../control-plane/src/billing/lease-policy.js';
import { checkLeaseInvariant, replayLedger } from '../../../control-plane/src/billing/ledger-replay.js';
import { settleIngestedRecords } from '../../../control-plane/src/billing/settlement.js';
import { withTransaction } from '../../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { migratedPool } from '../nodes-harness.js';
import { insertAccount, insertNode } from './billing-fixtures.js';

const HOUR = 3_600_000;
const GREEDY: LeasePolicy = { capMicros: 1_000_000_000_000n, sharePpm: 1_000_000n, ttlMs: HOUR, refreshMs: 1_000, holdMs: HOUR };

function interrupted(requestId: string, accountId: string, nodeId: string, leaseId: string, reserved: number, at: number, cost = 0): RequestRecord {
  return {
    schemaVersion: 1, requestId, nodeId, configVersion: 1, receivedAt: at, finishedAt: at + 10,
    surface: 'model', api: 'chat.completions', keyId: 'key-1', accountId, model: 'm', upstream: null, upstreamModel: null, stream: false,
    status: 'interrupted', httpStatus: 0, errorCode: null, usage: { inputTokens: 0, outputTokens: 0, estimated: false },
    cost: { reservedMicros: reserved, costMicros: cost, leaseId, priced: false },
    timings: { totalMs: 1, upstreamFirstByteMs: null, upstreamMs: null, stagesUs: {} }, attempts: [], guardrails: [], bodies: null,
  };
}

interface Figures {
  lease: { granted: bigint; returned: bigint; outstanding: bigint };
  /** account_balances.outstanding_micros. */
  storedOutstanding: bigint;
  /** Σ max(granted − spent − returned, 0) over the account's leases. */
  leasesHold: bigint;
}

async function figures(pool: pg.Pool, accountId: string, leaseId: string): Promise<Figures> {
  const l = await pool.query<{ g: string; r: string; o: string }>(
    'select granted_micros::text as g, returned_micros::text as r, (granted_micros - spent_micros - returned_micros)::text as o from credit_leases where id = $1',
    [leaseId],
  );
  const b = await pool.query<{ o: string }>('select outstanding_micros::text as o from account_balances where account_id = $1', [accountId]);
  const s = await pool.query<{ s: string }>(
    'select coalesce(sum(greatest(granted_micros - spent_micros - returned_micros, 0)), 0)::text as s from credit_leases where account_id = $1',
    [accountId],
  );
  return {
    lease: { granted: BigInt(l.rows[0]!.g), returned: BigInt(l.rows[0]!.r), outstanding: BigInt(l.rows[0]!.o) },
    storedOutstanding: BigInt(b.rows[0]!.o),
    leasesHold: BigInt(s.rows[0]!.s),
  };
}

interface WarnLine { level: number; msg: string; leaseId?: string; withheldMicros?: string; returnedMicros?: string; requestIds?: string[] }

function capturingLogger(): { log: pino.Logger; warnings: WarnLine[] } {
  const warnings: WarnLine[] = [];
  const log = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(JSON.parse(line) as WarnLine) });
  return { log, warnings };
}

t.test('interrupted write-offs never return more than their lease still holds', async (t) => {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);
  const tx = <T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> => withTransaction(pool, fn);

  t.test('a late interrupted record returns nothing once its closed lease released the hold, while one settled in time returned its whole reservation', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    const n2 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const now = Date.now();
    const l1 = (await tx((c) => topUpLease(c, n1, account, GREEDY, now))).lease!;
    // Killed with two requests open (400 000 and 100 000 reserved); at restart the node counts both spent.
    await tx((c) => recordLeaseReport(c, n1, { accountId: account, leaseId: l1.id, spentMicros: 500_000n, reservedMicros: 0n, reportedAt: BigInt(now) }));
    // The lease expires and is closed from that report when the account is leased to n2: 500 000 kept.
    await tx((c) => topUpLease(c, n2, account, GREEDY, now + 2 * HOUR));
    t.equal((await figures(pool, account, l1.id)).lease.outstanding, 500_000n, 'the closed lease keeps what the node counted spent');
    // One interrupted record arrives within the hold: its whole reservation goes back.
    const timely = capturingLogger();
    const first = await tx((c) => settleIngestedRecords(c, n1, [interrupted('late-a-timely', account, n1, l1.id, 100_000, now)], timely.log));
    t.equal(first.writtenOff, 1);
    t.equal(first.withheldWriteOffMicros, 0n);
    t.same(timely.warnings, [], 'a timely write-off warns of nothing');
    t.equal((await figures(pool, account, l1.id)).lease.outstanding, 400_000n, 'the timely record returned its 100 000');
    // Past the hold bound the rest of the closed lease (the other request's 400 000) goes back.
    await tx((c) => topUpLease(c, n2, account, GREEDY, now + 10 * HOUR));
    const before = await figures(pool, account, l1.id);
    t.equal(before.lease.outstanding, 0n);
    // The node is re-enrolled and delivers its old spool: the other interrupted record arrives.
    const late = capturingLogger();
    const res = await tx((c) => settleIngestedRecords(c, n1, [interrupted('late-a-late', account, n1, l1.id, 400_000, now)], late.log));
    const after = await figures(pool, account, l1.id);
    t.equal(res.writtenOff, 0, 'nothing written off');
    t.equal(res.withheldWriteOffMicros, 400_000n, 'the reservation the lease no longer held is counted');
    t.same(after, before, 'the lease and the account figures are unchanged');
    t.ok(after.lease.returned <= after.lease.granted, 'the lease never returns more than it was granted');
    t.equal(after.storedOutstanding, after.leasesHold, 'stored outstanding = Σ max(lease outstanding, 0)');
    const { rows } = await pool.query("select 1 from billing_ledger where request_id = 'late-a-late'");
    t.equal(rows.length, 0, 'no ledger row for the late record');
    t.match(late.warnings, [{
      level: 40, leaseId: l1.id, withheldMicros: '400000', returnedMicros: '0', requestIds: ['late-a-late'],
      msg: /not returned beyond what their credit lease still held/,
    }], 'never silent: one warning');
    t.same(await replayLedger(pool), []);
    t.same(await checkLeaseInvariant(pool), []);
  });

  t.test('an interrupted record of an expired lease reclaimed before the node ever reported returns nothing', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    const n2 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const now = Date.now();
    const l1 = (await tx((c) => topUpLease(c, n1, account, GREEDY, now))).lease!;
    // The node reserved 300 000 and died before any report; the expired lease is reclaimed whole.
    await tx((c) => topUpLease(c, n2, account, GREEDY, now + 2 * HOUR));
    const before = await figures(pool, account, l1.id);
    t.equal(before.lease.outstanding, 0n, 'the reclaim handed everything back');
    const { log, warnings } = capturingLogger();
    const res = await tx((c) => settleIngestedRecords(c, n1, [interrupted('reclaimed-a', account, n1, l1.id, 300_000, now)], log));
    const after = await figures(pool, account, l1.id);
    t.equal(res.writtenOff, 0);
    t.equal(res.withheldWriteOffMicros, 300_000n);
    t.same(after, before, 'nothing returned a second time');
    t.equal(after.storedOutstanding, after.leasesHold, 'stored outstanding = Σ max(lease outstanding, 0)');
    t.match(warnings, [{ leaseId: l1.id, withheldMicros: '300000', returnedMicros: '0' }]);
    t.same(await replayLedger(pool), []);
  });

  t.test('an interrupted record with a cost returns only what its closed lease holds beyond that cost, and a resent one nothing more', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const now = Date.now();
    const l1 = (await tx((c) => topUpLease(c, n1, account, GREEDY, now))).lease!;
    // Closed with 250 000 kept; the record then says 400 000 reserved, 100 000 of it charged.
    await tx((c) => returnLease(c, n1, account, l1.id, 250_000n));
    const rec = interrupted('costly-a', account, n1, l1.id, 400_000, now, 100_000);
    const { log, warnings } = capturingLogger();
    const res = await tx((c) => settleIngestedRecords(c, n1, [rec], log));
    const after = await figures(pool, account, l1.id);
    t.equal(res.charged, 1, 'the cost is debited');
    t.equal(res.writtenOff, 1, 'part of the reservation goes back');
    t.equal(res.withheldWriteOffMicros, 150_000n, '300 000 uncharged, 150 000 of it no longer held');
    t.equal(res.uncoveredMicros, 0n, 'the debit finds its cost held');
    t.equal(after.lease.outstanding, 0n, '250 000 − 150 000 returned − 100 000 debited');
    t.equal(after.storedOutstanding, after.leasesHold);
    t.match(warnings, [{ leaseId: l1.id, withheldMicros: '150000', returnedMicros: '150000', requestIds: ['costly-a'] }]);
    // The same record handed over again moves no money and warns of nothing.
    const resent = capturingLogger();
    const again = await tx((c) => settleIngestedRecords(c, n1, [rec], resent.log));
    t.same(again, { charged: 0, duplicates: 1, unknownAccount: 0, writtenOff: 0, released: 0, uncoveredMicros: 0n, withheldWriteOffMicros: 0n });
    t.same(await figures(pool, account, l1.id), after);
    t.same(resent.warnings, []);
    t.same(await replayLedger(pool), []);
    t.same(await checkLeaseInvariant(pool), []);
  });
});
