// A node whose lease book went back (restored from an older copy, lost, or the node re-enrolled on
// another host) reports less spend on a lease than the control plane already knows: less than its
// own earlier report, or less than the records settled from the lease. On real PostgreSQL: the
// control plane's view of the lease's spend never goes back (an expired or returned lease keeps
// what the node spent before), the report is logged at error level once per lease with the
// figures, the lease is topped up only from the node's own figures (which hold the spend it can
// make again), and a settlement that charges a lease more than it held logs a warning
// (docs/billing.md, "A lease book that went back").
import t from 'tap';
import type { Test } from 'tap';
import type pg from 'pg';
import { pino } from 'pino';
import type { ControlMessage, RequestRecord } from '../../../proto/src/index.js';
import { creditAccount } from '../../../control-plane/src/billing/account-credits.js';
import { recordLeaseReport, returnLease, topUpLease } from '../../../control-plane/src/billing/credit-leases.js';
import { createLeaseStreamHandler } from '../../../control-plane/src/billing/lease-stream-handler.js';
import type { LeasePolicy } from '../../../control-plane/src/billing/lease-policy.js';
import { checkLeaseInvariant, replayLedger } from '../../../control-plane/src/billing/ledger-replay.js';
import { settleIngestedRecords } from '../../../control-plane/src/billing/settlement.js';
import { withTransaction } from '../../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { migratedPool } from '../nodes-harness.js';
import { insertAccount, insertNode } from './billing-fixtures.js';

const HOUR = 3_600_000;
const GREEDY: LeasePolicy = { capMicros: 1_000_000_000_000n, sharePpm: 1_000_000n, ttlMs: HOUR, refreshMs: HOUR };
const QUARTER: LeasePolicy = { ...GREEDY, sharePpm: 250_000n };
/** Node clock of the figures an expiry or a return closes a lease with. */
const CUTOFF = 1_700_000_000_000;

/** A request that finished (and was counted spent by the node) before CUTOFF. */
function record(requestId: string, accountId: string, nodeId: string, leaseId: string, cost: number): RequestRecord {
  return {
    schemaVersion: 1, requestId, nodeId, configVersion: 1, receivedAt: CUTOFF - 5_000, finishedAt: CUTOFF - 4_000,
    surface: 'model', api: 'chat.completions', keyId: 'key-1', accountId, model: 'm', upstream: 'u', upstreamModel: 'm', stream: false,
    status: 'ok', httpStatus: 200, errorCode: null, usage: { inputTokens: 1, outputTokens: 1, estimated: false },
    cost: { reservedMicros: cost, costMicros: cost, leaseId, priced: true },
    timings: { totalMs: 1, upstreamFirstByteMs: 1, upstreamMs: 1, stagesUs: {} }, attempts: [], guardrails: [], bodies: null,
  };
}

/** The invariant check's findings for one account (other tests' accounts are theirs). */
const breaches = async (pool: pg.Pool, accountId: string): Promise<unknown[]> =>
  (await checkLeaseInvariant(pool)).filter((a) => a.accountId === accountId);

const records = (prefix: string, accountId: string, nodeId: string, leaseId: string, n: number, cost: number): RequestRecord[] =>
  Array.from({ length: n }, (_, i) => record(`${prefix}-${i}`, accountId, nodeId, leaseId, cost));

interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

function capturedLogger(): { logger: pino.Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as LogLine) });
  return { logger, lines };
}

async function leaseRow(pool: pg.Pool, leaseId: string): Promise<{ granted: bigint; outstanding: bigint; reportedSpent: bigint | null; state: string }> {
  const { rows } = await pool.query<{ g: string; o: string; rs: string | null; state: string }>(
    `select granted_micros::text as g, (granted_micros - spent_micros - returned_micros)::text as o, reported_spent_micros::text as rs, state
       from credit_leases where id = $1`,
    [leaseId],
  );
  const r = rows[0]!;
  return { granted: BigInt(r.g), outstanding: BigInt(r.o), reportedSpent: r.rs === null ? null : BigInt(r.rs), state: r.state };
}

t.test('lease reports whose spend went back', async (t) => {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);
  const tx = <T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> => withTransaction(pool, fn);

  /** A live session of the lease handler for one node, its grants collected. */
  async function session(t: Test, nodeId: string, policy: LeasePolicy, logger: pino.Logger) {
    const handler = createLeaseStreamHandler({ pool, logger, policy });
    const node = { nodeId, nodeName: 'edge-went-back', sessionId: `session-${nodeId}` };
    const sent: ControlMessage[] = [];
    const send = (m: ControlMessage): boolean => {
      sent.push(m);
      return true;
    };
    t.teardown(() => handler.onEnded?.(node));
    await handler.onLive!(node, send);
    const report = (accountId: string, leaseId: string, spentMicros: bigint, reportedAt = BigInt(Date.now())): Promise<void> =>
      handler.handle(node, { leaseReport: { accountId, leaseId, spentMicros, reservedMicros: 0n, remainingMicros: 0n, reportedAt } }, send);
    return { sent, report };
  }

  t.test('a report of less spend than the node reported before does not lower the spend an expired lease keeps for its records', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    const n2 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const l1 = (await tx((c) => topUpLease(c, n1, account, GREEDY, CUTOFF - HOUR))).lease!;
    await tx((c) => recordLeaseReport(c, n1, { accountId: account, leaseId: l1.id, spentMicros: 300_000n, reservedMicros: 0n, reportedAt: BigInt(CUTOFF - 3_000) }));
    // The node's lease book is restored from a copy older than 200 000 of that spend.
    await tx((c) => recordLeaseReport(c, n1, { accountId: account, leaseId: l1.id, spentMicros: 100_000n, reservedMicros: 0n, reportedAt: BigInt(CUTOFF - 2_000) }));
    t.equal((await leaseRow(pool, l1.id)).reportedSpent, 300_000n, 'the spend reported before is kept');
    // The lease expires and another node is leased: L1 keeps what its node spent, records to come.
    const l2 = (await tx((c) => topUpLease(c, n2, account, GREEDY, CUTOFF + HOUR))).lease!;
    t.equal(l2.granted, 700_000n, 'only what the expired lease does not hold for its spend is leased again');
    t.equal((await leaseRow(pool, l1.id)).outstanding, 300_000n);
    const settled = await tx((c) => settleIngestedRecords(c, n1, records('went-back-expiry', account, n1, l1.id, 3, 100_000)));
    t.equal(settled.charged, 3);
    t.equal(settled.uncoveredMicros, 0n, 'every record of the spend reported before was covered by the lease');
    t.same(await breaches(pool, account), [], 'Σ outstanding ≤ balance');
    t.same(await replayLedger(pool), []);
  });

  t.test('a lease return with less spend than the node reported before keeps that spend on the closed lease', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    const n2 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const l1 = (await tx((c) => topUpLease(c, n1, account, GREEDY, Date.now()))).lease!;
    await tx((c) => recordLeaseReport(c, n1, { accountId: account, leaseId: l1.id, spentMicros: 300_000n, reservedMicros: 0n, reportedAt: BigInt(CUTOFF - 3_000) }));
    const given = await tx((c) => returnLease(c, n1, account, l1.id, 100_000n, 0n, CUTOFF));
    t.equal(given, 700_000n, 'granted − the 300 000 the node reported spent goes back, not granted − 100 000');
    const l2 = (await tx((c) => topUpLease(c, n2, account, GREEDY, Date.now()))).lease!;
    t.equal(l2.granted, 700_000n);
    const settled = await tx((c) => settleIngestedRecords(c, n1, records('went-back-return', account, n1, l1.id, 3, 100_000)));
    t.equal(settled.uncoveredMicros, 0n);
    t.same(await breaches(pool, account), []);
    t.same(await replayLedger(pool), []);
  });

  t.test('a report of less spend than the control plane settled from the lease\'s records is logged at error level once, with the figures', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const { logger, lines } = capturedLogger();
    const { sent, report } = await session(t, n1, GREEDY, logger);
    const leaseId = sent.find((m) => m.leaseGrant?.accountId === account)!.leaseGrant!.leaseId;
    await tx((c) => settleIngestedRecords(c, n1, records('went-back-settled', account, n1, leaseId, 3, 100_000)));
    // The node's lease book was lost: the grant it was sent again starts from nothing spent.
    await report(account, leaseId, 0n);
    await report(account, leaseId, 0n);
    const errors = lines.filter((l) => l.level === 50 && l.leaseId === leaseId);
    t.equal(errors.length, 1, 'logged once for the lease');
    t.match(errors[0], {
      nodeId: n1, node: 'edge-went-back', accountId: account, leaseId,
      reportedSpentMicros: '0', settledSpentMicros: '300000', knownSpentMicros: '300000', behindMicros: '300000',
    });
    t.match(errors[0]!.msg, /less spend .* than the control plane already knows/);
    t.equal((await leaseRow(pool, leaseId)).reportedSpent, 300_000n, 'the control plane\'s view of the spend did not go back');
  });

  t.test('a report of less spend than the node\'s previous report is logged at error level once, with both figures', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const { logger, lines } = capturedLogger();
    const { sent, report } = await session(t, n1, GREEDY, logger);
    const leaseId = sent.find((m) => m.leaseGrant?.accountId === account)!.leaseGrant!.leaseId;
    await report(account, leaseId, 300_000n);
    t.same(lines.filter((l) => l.level >= 50), [], 'a report ahead of settlement is normal');
    await report(account, leaseId, 100_000n);
    await report(account, leaseId, 120_000n);
    const errors = lines.filter((l) => l.level === 50 && l.leaseId === leaseId);
    t.equal(errors.length, 1, 'logged once for the lease');
    t.match(errors[0], { nodeId: n1, leaseId, reportedSpentMicros: '100000', previousReportedSpentMicros: '300000', settledSpentMicros: '0', knownSpentMicros: '300000' });
    t.equal((await leaseRow(pool, leaseId)).reportedSpent, 300_000n);
  });

  t.test('a lease whose node reported less spend than known is topped up only once the node\'s own figures fall below its target', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const { logger } = capturedLogger();
    const { sent, report } = await session(t, n1, QUARTER, logger);
    const leaseId = sent.find((m) => m.leaseGrant?.accountId === account)!.leaseGrant!.leaseId;
    t.equal((await leaseRow(pool, leaseId)).granted, 250_000n, 'a quarter of the balance');
    await tx((c) => settleIngestedRecords(c, n1, records('went-back-top-up', account, n1, leaseId, 2, 100_000)));
    // Balance 800 000, the lease holds 50 000 by the control plane's figures: target 200 000. The
    // node's book went back to nothing spent, so by its own figures it holds all 250 000: it can
    // reserve that much, and a top-up sized from the control plane's figures would give it more.
    await report(account, leaseId, 0n);
    t.equal((await leaseRow(pool, leaseId)).granted, 250_000n, 'nothing added while the node\'s own figures hold more than the target');
    // The node has spent 150 000 of its own figures since: 100 000 left by them, below the target.
    await report(account, leaseId, 150_000n);
    const lease = await leaseRow(pool, leaseId);
    t.equal(lease.granted, 350_000n, 'topped up to the target by the node\'s own figures (350 000 − 150 000), not beyond');
    t.equal(sent.at(-1)?.leaseGrant?.amountMicros, 350_000n, 'and the grant sent');
    t.same(await breaches(pool, account), []);
    t.same(await replayLedger(pool), []);
  });

  t.test('a settlement that charges a lease more than it still held logs a warning with the figures', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    await creditAccount(pool, account, 1_000n, null);
    const l1 = (await tx((c) => topUpLease(c, n1, account, GREEDY, Date.now()))).lease!;
    // Returned with nothing spent: all of it went back, and then a record of 300 arrives for it.
    t.equal(await tx((c) => returnLease(c, n1, account, l1.id, 0n, 0n, CUTOFF)), 1_000n);
    const { logger, lines } = capturedLogger();
    const result = await tx((c) => settleIngestedRecords(c, n1, [record('uncovered-1', account, n1, l1.id, 300)], logger));
    t.equal(result.uncoveredMicros, 300n);
    const warnings = lines.filter((l) => l.level === 40);
    t.equal(warnings.length, 1);
    t.match(warnings[0], { nodeId: n1, accountId: account, leaseId: l1.id, leaseState: 'returned', uncoveredMicros: '300', chargedMicros: '300' });
    // A cost the lease held is charged without a word.
    const l2 = (await tx((c) => topUpLease(c, n1, account, GREEDY, Date.now()))).lease!;
    const quiet = capturedLogger();
    const covered = await tx((c) => settleIngestedRecords(c, n1, [record('covered-1', account, n1, l2.id, 100)], quiet.logger));
    t.equal(covered.charged, 1);
    t.equal(covered.uncoveredMicros, 0n);
    t.same(quiet.lines, [], 'nothing logged when every cost was covered');
  });
});
