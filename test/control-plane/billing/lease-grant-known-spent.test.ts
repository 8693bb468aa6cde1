// Every LeaseGrant carries the spend the control plane knows of the lease (known_spent_micros): the
// most the node reported and what was settled from the lease's records, write-offs of interrupted
// requests included. The node counts at least that much spent, so a node whose lease book went back
// (lost, restored, or re-enrolled on another host) is told what it already spent on its next grant:
// on connect, and after a report below that spend even when nothing else changed. On real PostgreSQL
// (docs/billing.md, "A lease book that went back").
import t from 'tap';
import type { Test } from 'tap';
import type pg from 'pg';
import { pino } from 'pino';
import type { ControlMessage, LeaseGrant, RequestRecord } from '../../../proto/src/index.js';
import { creditAccount } from '../../../control-plane/src/billing/account-credits.js';
import { topUpLease } from '../../../control-plane/src/billing/credit-leases.js';
import { createLeaseStreamHandler } from '../../../control-plane/src/billing/lease-stream-handler.js';
import type { LeasePolicy } from '../../../control-plane/src/billing/lease-policy.js';
import { settleIngestedRecords } from '../../../control-plane/src/billing/settlement.js';
import { withTransaction } from '../../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { migratedPool } from '../nodes-harness.js';
import { insertAccount, insertNode } from './billing-fixtures.js';

const HOUR = 3_600_000;
const QUARTER: LeasePolicy = { capMicros: 1_000_000_000_000n, sharePpm: 250_000n, ttlMs: HOUR, refreshMs: HOUR };

function record(requestId: string, accountId: string, nodeId: string, leaseId: string, cost: { reserved: number; cost: number; interrupted?: boolean }): RequestRecord {
  const now = Date.now();
  return {
    schemaVersion: 1, requestId, nodeId, configVersion: 1, receivedAt: now - 2_000, finishedAt: now - 1_000,
    surface: 'model', api: 'chat.completions', keyId: 'key-1', accountId, model: 'm', upstream: 'u', upstreamModel: 'm', stream: false,
    status: cost.interrupted === true ? 'interrupted' : 'ok', httpStatus: 200, errorCode: null, usage: { inputTokens: 1, outputTokens: 1, estimated: false },
    cost: { reservedMicros: cost.reserved, costMicros: cost.cost, leaseId, priced: true },
    timings: { totalMs: 1, upstreamFirstByteMs: 1, upstreamMs: 1, stagesUs: {} }, attempts: [], guardrails: [], bodies: null,
  };
}

t.test('lease grants carry the known spend', async (t) => {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);
  const tx = <T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> => withTransaction(pool, fn);
  const logger = pino({ level: 'silent' });

  /** A live session of the lease handler for one node (a new session id: a reconnect), its grants collected. */
  async function session(t: Test, nodeId: string, sessionId: string) {
    const handler = createLeaseStreamHandler({ pool, logger, policy: QUARTER });
    const node = { nodeId, nodeName: 'edge-known-spent', sessionId };
    const sent: ControlMessage[] = [];
    const send = (m: ControlMessage): boolean => {
      sent.push(m);
      return true;
    };
    t.teardown(() => handler.onEnded?.(node));
    await handler.onLive!(node, send);
    const grants = (accountId: string): LeaseGrant[] => sent.flatMap((m) => (m.leaseGrant?.accountId === accountId ? [m.leaseGrant] : []));
    const report = (accountId: string, leaseId: string, spentMicros: bigint): Promise<void> =>
      handler.handle(node, { leaseReport: { accountId, leaseId, spentMicros, reservedMicros: 0n, remainingMicros: 0n, reportedAt: BigInt(Date.now()) } }, send);
    return { grants, report };
  }

  t.test('the first grant carries no known spend, and the top-up after a report carries the spend the node reported', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const { grants, report } = await session(t, n1, `first-${n1}`);
    const first = grants(account).at(-1)!;
    t.equal(first.amountMicros, 250_000n);
    t.equal(first.knownSpentMicros, 0n, 'nothing is known spent of a new lease');
    await report(account, first.leaseId, 100_000n);
    const topUp = grants(account).at(-1)!;
    t.equal(topUp.amountMicros, 350_000n, 'topped up to the target');
    t.equal(topUp.knownSpentMicros, 100_000n, 'the grant carries the spend the node reported');
  });

  t.test('the grant to a reconnecting node carries the most of its reports and the settled spend, write-offs of interrupted requests included', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const before = await session(t, n1, `before-${n1}`);
    const leaseId = before.grants(account).at(-1)!.leaseId;
    await before.report(account, leaseId, 60_000n);
    // Records settle beyond what the node last reported: 2 × 50 000, and an interrupted request
    // whose 40 000 reservation the node counted whole (10 000 charged, 30 000 written off).
    await tx((c) => settleIngestedRecords(c, n1, [
      record(`known-a-${n1}`, account, n1, leaseId, { reserved: 50_000, cost: 50_000 }),
      record(`known-b-${n1}`, account, n1, leaseId, { reserved: 50_000, cost: 50_000 }),
      record(`known-c-${n1}`, account, n1, leaseId, { reserved: 40_000, cost: 10_000, interrupted: true }),
    ]));
    // The node re-enrolls on another host (or lost its lease book) and connects again.
    const after = await session(t, n1, `after-${n1}`);
    const regrant = after.grants(account).at(-1)!;
    t.equal(regrant.leaseId, leaseId, 'the open lease is granted again');
    t.equal(regrant.knownSpentMicros, 140_000n, 'max(reported 60 000, settled 110 000 + written off 30 000)');
    // Direct: topUpLease gives the same figure, and a report above it raises it.
    await after.report(account, leaseId, 180_000n);
    const direct = (await tx((c) => topUpLease(c, n1, account, QUARTER, Date.now()))).lease!;
    t.equal(direct.knownSpent, 180_000n, 'the node\'s own larger report is known');
  });

  t.test('a report below the known spend is answered with the grant even when its amount and expiry did not change', async (t) => {
    const account = await insertAccount(pool);
    const n1 = await insertNode(pool);
    await creditAccount(pool, account, 1_000_000n, null);
    const { grants, report } = await session(t, n1, `behind-${n1}`);
    const leaseId = grants(account).at(-1)!.leaseId;
    await report(account, leaseId, 200_000n);
    const count = grants(account).length;
    const last = grants(account).at(-1)!;
    await report(account, leaseId, 200_000n);
    t.equal(grants(account).length, count, 'an unchanged grant is not sent again to a node that agrees');
    // The node's lease book went back: it reports less than it reported before.
    await report(account, leaseId, 50_000n);
    t.equal(grants(account).length, count + 1, 'the grant is sent again');
    t.same(grants(account).at(-1), { ...last, knownSpentMicros: 200_000n }, 'same amount and expiry, with the spend the node must count');
    // It took the known spend: its reports agree again, and nothing more is sent.
    await report(account, leaseId, 200_000n);
    t.equal(grants(account).length, count + 1);
  });
});
