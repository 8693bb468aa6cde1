// Closed credit leases on real PostgreSQL (docs/billing.md, "Closed leases"): a lease closed by
// expiry or by a LeaseReturn while requests were in flight keeps their reservations outstanding,
// each late record releases its reserved − cost once, what is left goes back when nothing can
// arrive any more, and an account whose leases hold more than its balance is reported. Also: a
// live lease's expiry moves forward on refresh even when nothing is added.
import t from 'tap';
import type pg from 'pg';
import { pino } from 'pino';
import type { ControlMessage, RequestRecord } from '../../../proto/src/index.js';
import { creditAccount } from '../../../control-plane/src/billing/account-credits.js';
import { recordLeaseReport, returnLease, returnLeasesOfNode, topUpLease } from '../../../control-plane/src/billing/credit-leases.js';
import { createLeaseStreamHandler } from '../../../control-plane/src/billing/lease-stream-handler.js';
import type { LeasePolicy } from '../../../control-plane/src/billing/lease-policy.js';
import * as replay from '../../../control-plane/src/billing/ledger-replay.js';
import { settleIngestedRecords } from '../../../control-plane/src/billing/settlement.js';
import { withTransaction } from '../../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { migratedPool } from '../nodes-harness.js';
import { insertAccount, insertNode, storedBalance } from './billing-fixtures.js';

const HOUR = 3_600_000;
const GREEDY: LeasePolicy = { capMicros: 1_000_000_000_000n, sharePpm: 1_000_000n, ttlMs: HOUR, refreshMs: 1_000 };
const QUARTER: LeasePolicy = { ...GREEDY, sharePpm: 250_000n };
/** Node clock of the figures a close uses; records received before and finished after it were in flight. */
const CUTOFF = 1_700_000_000_000;

function record(requestId: string, accountId: string, nodeId: string, leaseId: string, reserved: number, cost: number, finishedAt = CUTOFF + 500): RequestRecord {
  return {
    schemaVersion: 1, requestId, nodeId, configVersion: 1, receivedAt: CUTOFF - 500, finishedAt,
    surface: 'model', api: 'chat.completions', keyId: 'key-1', accountId, model: 'm', upstream: 'u', upstreamModel: 'm', stream: false,
    status: 'ok', httpStatus: 200, errorCode: null, usage: { inputTokens: 1, outputTokens: 1, estimated: false },
    cost: { reservedMicros: reserved, costMicros: cost, leaseId, priced: true },
    timings: { totalMs: 1, upstreamFirstByteMs: 1, upstreamMs: 1, stagesUs: {} }, attempts: [], guardrails: [], bodies: null,
  };
}

async function leaseOutstanding(pool: pg.Pool, leaseId: string): Promise<bigint> {
  const { rows } = await pool.query<{ o: string }>('select (granted_micros - spent_micros - returned_micros)::text as o from credit_leases where id = $1', [leaseId]);
  return BigInt(rows[0]!.o);
}

/** Σ max(outstanding, 0) of the account's leases: what the invariant bounds by the balance. */
async function committed(pool: pg.Pool, accountId: string): Promise<bigint> {
  const { rows } = await pool.query<{ s: string }>(
    'select coalesce(sum(greatest(granted_micros - spent_micros - returned_micros, 0)), 0)::text as s from credit_leases where account_id = $1',
    [accountId],
  );
  return BigInt(rows[0]!.s);
}

async function invariantBreaches(pool: pg.Pool): Promise<unknown[]> {
  const check = (replay as Record<string, unknown>).checkLeaseInvariant as ((db: pg.Pool) => Promise<unknown[]>) | undefined;
  if (check === undefined) throw new Error('no lease invariant check beside replayLedger');
  return check(pool);
}

t.test('closed credit leases', async (t) => {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);
  const tx = <T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> => withTransaction(pool, fn);

  t.test('an expired lease keeps the reservations its node reported outstanding, so a late record cannot push the leases above the balance', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    const n2 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const l1 = (await tx((c) => topUpLease(c, n1, account, GREEDY, CUTOFF - HOUR))).lease!;
    await tx((c) => recordLeaseReport(c, n1, { accountId: account, leaseId: l1.id, spentMicros: 0n, reservedMicros: 400_000n, reportedAt: BigInt(CUTOFF) }));
    // After expiry another node is leased: L1 is reclaimed except the 400 000 still reserved.
    const l2 = (await tx((c) => topUpLease(c, n2, account, GREEDY, CUTOFF + HOUR))).lease!;
    t.equal(l2.granted, 600_000n, 'the new lease gets only what the closed one does not hold');
    t.equal(await leaseOutstanding(pool, l1.id), 400_000n);
    // The in-flight request finishes at its full reservation.
    await tx((c) => settleIngestedRecords(c, n1, [record('exp-1', account, n1, l1.id, 400_000, 400_000)]));
    t.equal(await leaseOutstanding(pool, l1.id), 0n);
    const { balance } = await storedBalance(pool, account);
    t.equal(balance, 600_000n);
    t.ok((await committed(pool, account)) <= balance, 'Σ outstanding ≤ balance');
    t.same(await invariantBreaches(pool), []);
    t.same(await replay.replayLedger(pool), []);
  });

  t.test('a late record of an expired lease releases its reserved − cost once, however often it arrives', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const l1 = (await tx((c) => topUpLease(c, n1, account, GREEDY, CUTOFF - HOUR))).lease!;
    // 100 000 settled on the node (its record not ingested yet), 400 000 held by two requests.
    await tx((c) => recordLeaseReport(c, n1, { accountId: account, leaseId: l1.id, spentMicros: 100_000n, reservedMicros: 400_000n, reportedAt: BigInt(CUTOFF) }));
    await tx((c) => topUpLease(c, n1, account, GREEDY, CUTOFF + HOUR)); // reclaims L1, opens a new lease for the rest
    t.equal(await leaseOutstanding(pool, l1.id), 500_000n);
    // The record settled before the report (finished before the cutoff) releases nothing.
    await tx((c) => settleIngestedRecords(c, n1, [record('exp-settled', account, n1, l1.id, 300_000, 100_000, CUTOFF - 1)]));
    t.equal(await leaseOutstanding(pool, l1.id), 400_000n);
    const first = await tx((c) => settleIngestedRecords(c, n1, [record('exp-2', account, n1, l1.id, 250_000, 50_000)]));
    t.equal(first.released, 1);
    t.equal(await leaseOutstanding(pool, l1.id), 150_000n, '250 000 reserved − 50 000 cost released, 50 000 charged');
    const again = await tx((c) => settleIngestedRecords(c, n1, [record('exp-2', account, n1, l1.id, 250_000, 50_000)]));
    t.equal(again.released, 0, 'a resent record releases nothing more');
    t.equal(await leaseOutstanding(pool, l1.id), 150_000n);
    await tx((c) => settleIngestedRecords(c, n1, [record('exp-3', account, n1, l1.id, 150_000, 0)]));
    t.equal(await leaseOutstanding(pool, l1.id), 0n, 'the last in-flight request cost nothing: all of it released');
    t.same(await invariantBreaches(pool), []);
    t.same(await replay.replayLedger(pool), []);
  });

  t.test('a lease returned while requests are in flight releases each one\'s reserved − cost when its record settles', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    const n2 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const l1 = (await tx((c) => topUpLease(c, n1, account, GREEDY, Date.now()))).lease!;
    // Node: granted 1 000 000, nothing settled, 300 000 reserved → returns 700 000, spent (reservations included) 300 000.
    const given = await tx((c) => returnLease(c, n1, account, l1.id, 300_000n, 300_000n, CUTOFF));
    t.equal(given, 700_000n);
    t.equal(await leaseOutstanding(pool, l1.id), 300_000n);
    await tx((c) => settleIngestedRecords(c, n1, [record('ret-1', account, n1, l1.id, 300_000, 100_000)]));
    t.equal(await leaseOutstanding(pool, l1.id), 0n, 'the closed lease holds nothing once its in-flight request settled');
    const l2 = (await tx((c) => topUpLease(c, n2, account, GREEDY, Date.now()))).lease!;
    t.equal(l2.granted, 900_000n, 'the next node is offered the whole balance left');
    t.same(await invariantBreaches(pool), []);
    t.same(await replay.replayLedger(pool), []);
  });

  t.test('the lease handler passes a LeaseReturn\'s reserved part and time through, and takes a return without them', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    const n2 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const handler = createLeaseStreamHandler({ pool, logger: pino({ level: 'silent' }), policy: { ...QUARTER, refreshMs: HOUR } });
    const l1 = (await tx((c) => topUpLease(c, n1, account, QUARTER, Date.now()))).lease!;
    const l2 = (await tx((c) => topUpLease(c, n2, account, QUARTER, Date.now()))).lease!;
    const node1 = { nodeId: n1, nodeName: 'n1', sessionId: 'ret-session-1' };
    await handler.handle(node1, { leaseReturn: { accountId: account, leaseId: l1.id, spentMicros: 80_000n, returnedMicros: l1.granted - 80_000n, reservedMicros: 60_000n, returnedAt: BigInt(CUTOFF) } }, () => true);
    t.equal(await leaseOutstanding(pool, l1.id), 80_000n);
    await tx((c) => settleIngestedRecords(c, n1, [record('h-ret-1', account, n1, l1.id, 60_000, 5_000)]));
    t.equal(await leaseOutstanding(pool, l1.id), 20_000n, '55 000 released; 20 000 settled on the node, its record still to come');
    // An older node: no reserved part, no time.
    const node2 = { nodeId: n2, nodeName: 'n2', sessionId: 'ret-session-2' };
    await handler.handle(node2, { leaseReturn: { accountId: account, leaseId: l2.id, spentMicros: 10_000n, returnedMicros: l2.granted - 10_000n } }, () => true);
    t.equal(await leaseOutstanding(pool, l2.id), 10_000n);
    t.same(await replay.replayLedger(pool), []);
  });

  t.test('a closed lease gives back what it still holds when the hold bound passes or its node is deleted', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    const n2 = await insertNode(pool);
    const n3 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const policy: LeasePolicy = { ...QUARTER, holdMs: 10 * HOUR };
    const now = Date.now();
    // An older node: no reserved part in its LeaseReturn, so no record can be told in flight.
    const l1 = (await tx((c) => topUpLease(c, n1, account, policy, now))).lease!;
    t.equal(await tx((c) => returnLease(c, n1, account, l1.id, 50_000n)), 200_000n);
    const l2 = (await tx((c) => topUpLease(c, n2, account, policy, now))).lease!;
    t.equal(await tx((c) => returnLease(c, n2, account, l2.id, 30_000n, 30_000n, CUTOFF)), l2.granted - 30_000n);
    await tx((c) => settleIngestedRecords(c, n1, [record('hold-1', account, n1, l1.id, 50_000, 10_000)]));
    t.equal(await leaseOutstanding(pool, l1.id), 40_000n, 'held until the bound');
    // Node 2 is deleted: its closed lease's hold goes back at once.
    await tx((c) => returnLeasesOfNode(c, n2));
    t.equal(await leaseOutstanding(pool, l2.id), 0n);
    // Before the bound nothing moves; after it, the rest of L1 goes back with a ledger row.
    await tx((c) => topUpLease(c, n3, account, policy, now + HOUR));
    t.equal(await leaseOutstanding(pool, l1.id), 40_000n);
    await tx((c) => topUpLease(c, n3, account, policy, now + 11 * HOUR));
    t.equal(await leaseOutstanding(pool, l1.id), 0n);
    const { rows } = await pool.query<{ n: string }>("select count(*)::text as n from billing_ledger where lease_id = $1 and kind = 'lease_return' and request_id is null", [l1.id]);
    t.equal(rows[0]!.n, '2', 'the return at close and the release at the bound');
    t.same(await replay.replayLedger(pool), []);
  });

  t.test('a node gone for good that took all of an account\'s credit does not keep it: once its lease expires, or the hold of its closed lease passes, another live node is granted the credit', async (t) => {
    const policy: LeasePolicy = { ...GREEDY, holdMs: 10 * HOUR };
    const t0 = Date.now();
    let now = t0;
    let handler = createLeaseStreamHandler({ pool, logger: pino({ level: 'silent' }), policy, now: () => now });
    /** What one session of `nodeId` is granted of `account` when it goes live at `now` (a lease's whole amount). */
    const grantedTo = async (nodeId: string, account: string): Promise<bigint> => {
      const node = { nodeId, nodeName: 'b', sessionId: `reclaim-${nodeId}-${now}` };
      const sent: ControlMessage[] = [];
      await handler.onLive!(node, (m) => {
        sent.push(m);
        return true;
      });
      handler.onEnded!(node);
      return sent.filter((m) => m.leaseGrant?.accountId === account).reduce((sum, m) => sum + m.leaseGrant!.amountMicros, 0n);
    };

    // Expired while open: node A took the whole balance and was never heard from again.
    const expiring = await insertAccount(pool);
    await creditAccount(pool, expiring, 1_000n, null);
    const a = await insertNode(pool);
    const b = await insertNode(pool);
    t.equal((await tx((c) => topUpLease(c, a, expiring, policy, t0))).addedMicros, 1_000n, 'A leases the whole balance');
    t.equal(await grantedTo(b, expiring), 0n, 'before A\'s lease expires, B gets nothing: there is nothing free');
    now = t0 + HOUR + 1_000;
    t.equal(await grantedTo(b, expiring), 1_000n, 'after it, B is granted the credit A\'s lease held');
    t.same(await replay.replayLedger(pool), []);

    // Closed with a reservation no record ever settled: held until the bound (leases live longer
    // than it here, so only the hold ends within the test's time), then another node's.
    const longLived: LeasePolicy = { ...policy, ttlMs: 100 * HOUR };
    handler = createLeaseStreamHandler({ pool, logger: pino({ level: 'silent' }), policy: longLived, now: () => now });
    now = t0;
    const held = await insertAccount(pool);
    await creditAccount(pool, held, 1_000n, null);
    const c = await insertNode(pool);
    const d = await insertNode(pool);
    const lease = (await tx((cl) => topUpLease(cl, c, held, longLived, t0))).lease!;
    t.equal(await tx((cl) => returnLease(cl, c, held, lease.id, 400n, 400n, CUTOFF)), 600n, 'C returns its lease, 400 of it reserved by a request in flight');
    t.equal(await grantedTo(d, held), 600n, 'D gets what C handed back; C\'s reserved 400 stays held');
    const e = await insertNode(pool);
    now = t0 + 9 * HOUR;
    t.equal(await grantedTo(e, held), 0n, 'within the hold bound a node without a lease of the account gets nothing: D holds the rest');
    now = t0 + 10 * HOUR + 1_000;
    t.equal(await grantedTo(e, held), 400n, 'past it, that node is granted the 400 C\'s lease held');
    t.equal(await leaseOutstanding(pool, lease.id), 0n);
  });

  t.test('an account whose leases hold more than its balance is reported and logged at error level', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    await creditAccount(pool, account, 1_000n, null);
    const l1 = (await tx((c) => topUpLease(c, n1, account, GREEDY, Date.now()))).lease!;
    // A cost charged to the balance alone (no lease of this node): the lease still holds 1 000.
    const result = await tx((c) => settleIngestedRecords(c, n1, [{ ...record('over-1', account, n1, l1.id, 300, 300), cost: { reservedMicros: 300, costMicros: 300, leaseId: null, priced: true } }]));
    t.equal(result.charged, 1);
    t.match(await invariantBreaches(pool), [{ accountId: account, balanceMicros: 700n, committedMicros: 1_000n }]);
    const lines: Array<{ level: number; msg: string; accountId?: string; overcommittedMicros?: string }> = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as (typeof lines)[number]) });
    const handler = createLeaseStreamHandler({ pool, logger, policy: GREEDY });
    const node = { nodeId: n1, nodeName: 'n1', sessionId: 'over-session' };
    t.teardown(() => handler.onEnded?.(node));
    await handler.onLive!(node, () => true);
    t.ok(lines.some((l) => l.level === 50 && l.accountId === account && l.overcommittedMicros === '300'), 'logged at error level');
    // A top-up brings the account back within its leases (the check is over all accounts).
    await creditAccount(pool, account, 300n, null);
    t.same(await invariantBreaches(pool), []);
  });

  t.test('a refresh of a live lease pushes its expiry forward even when nothing is added', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const t0 = Date.now();
    const first = (await tx((c) => topUpLease(c, n1, account, QUARTER, t0))).lease!;
    t.equal(first.expiresAt, t0 + HOUR);
    await tx((c) => recordLeaseReport(c, n1, { accountId: account, leaseId: first.id, spentMicros: 10_000n, reservedMicros: 0n, reportedAt: BigInt(t0) }));
    // One second before expiry: a top-up of 10 000 is too small to make, but the lease must not run out.
    const later = await tx((c) => topUpLease(c, n1, account, QUARTER, t0 + HOUR - 1_000));
    t.equal(later.addedMicros, 0n);
    t.equal(later.lease!.id, first.id, 'the same lease');
    t.equal(later.lease!.granted, first.granted, 'nothing added');
    t.equal(later.lease!.expiresAt, t0 + 2 * HOUR - 1_000, 'the expiry moved to a full TTL from now');
    // Past the first expiry the lease is still open: the next grant does not reclaim it.
    await tx((c) => topUpLease(c, n1, account, QUARTER, t0 + HOUR + 1_000));
    const { rows } = await pool.query<{ state: string }>('select state from credit_leases where id = $1', [first.id]);
    t.equal(rows[0]!.state, 'open');
  });

  t.test('the lease handler sends the grant with the new expiry even when the amount did not change', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    let now = Date.now();
    const handler = createLeaseStreamHandler({ pool, logger: pino({ level: 'silent' }), policy: { ...QUARTER, refreshMs: HOUR }, now: () => now });
    const node = { nodeId: n1, nodeName: 'n1', sessionId: 'refresh-session' };
    const sent: ControlMessage[] = [];
    const send = (m: ControlMessage): boolean => {
      sent.push(m);
      return true;
    };
    t.teardown(() => handler.onEnded?.(node));
    await handler.onLive!(node, send);
    const first = sent.find((m) => m.leaseGrant?.accountId === account)!.leaseGrant!;
    t.equal(first.expiresAt, BigInt(now + HOUR));
    now += HOUR - 1_000;
    const before = sent.length;
    const report = { accountId: account, leaseId: first.leaseId, spentMicros: 10_000n, reservedMicros: 0n, remainingMicros: first.amountMicros - 10_000n, reportedAt: BigInt(now) };
    await handler.handle(node, { leaseReport: report }, send);
    t.equal(sent.length, before + 1, 'a grant was sent');
    t.same(sent.at(-1), { leaseGrant: { accountId: account, leaseId: first.leaseId, amountMicros: first.amountMicros, expiresAt: BigInt(now + HOUR), knownSpentMicros: 10_000n } });
    await handler.handle(node, { leaseReport: report }, send);
    t.equal(sent.length, before + 1, 'an unchanged grant is not sent again');
  });
});
