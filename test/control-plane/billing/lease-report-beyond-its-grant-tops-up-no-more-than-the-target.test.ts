// A LeaseReport whose figures pass what the lease was granted (a hostile or broken node, or an
// honest one whose costs overshot their reservations) over the real gRPC gateway and PostgreSQL:
// the lease is topped up to the policy's target and no further, other nodes are still leased the
// account, and the node's later return gives back what its grant-bounded figures leave
// (docs/billing.md, "Node figures beyond the grant").
import t from 'tap';
import type pg from 'pg';
import type { RequestRecord } from '../../../proto/src/index.js';
import { creditAccount } from '../../../control-plane/src/billing/account-credits.js';
import { recordLeaseReport, topUpLease } from '../../../control-plane/src/billing/credit-leases.js';
import { checkLeaseInvariant, checkLeaseReturns, replayLedger } from '../../../control-plane/src/billing/ledger-replay.js';
import { settleIngestedRecords } from '../../../control-plane/src/billing/settlement.js';
import { withTransaction } from '../../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { enrolledNode, gatewayIdentity, gatewaySettings, liveSession, migratedPool, startTestGateway } from '../gateway-harness.js';
import { insertAccount, insertNode, storedBalance } from './billing-fixtures.js';
import { QUARTER_SHARE_POLICY, leaseChargedRecord, leaseRow, nextGrantOf, nextOf } from './lease-figures-fixtures.js';

/** A record of the lease that finished 10 s ago, received a second before. */
function settledRecord(requestId: string, accountId: string, nodeId: string, leaseId: string, reserved: number, cost: number): RequestRecord {
  const at = Date.now() - 10_000;
  return leaseChargedRecord(requestId, accountId, nodeId, leaseId, reserved, cost, { receivedAt: at - 1_000, finishedAt: at });
}

t.test('lease figures beyond the grant', async (t) => {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);
  const identity = await gatewayIdentity();
  const settings = gatewaySettings(db.url);
  const gateway = await startTestGateway(t, { pool, settings, identity });

  t.test('a report of spend far beyond its grant tops the lease up to the target only, another node is still leased the account, and the return gives back what the grant-bounded spend leaves', async (t) => {
    const account = await insertAccount(pool);
    await creditAccount(pool, account, 10_000_000n, null);
    const nodeA = await enrolledNode(pool, settings);
    const { conn: a } = await liveSession(t, gateway.server.port, identity.caPem, nodeA);
    const first = await nextGrantOf(a, account, 'first grant of A');
    t.equal(first.amountMicros, 2_500_000n, 'a quarter of the free balance');

    a.send({ leaseReport: { accountId: account, leaseId: first.leaseId, spentMicros: 9_000_000_000_000n, reservedMicros: 0n, remainingMicros: 0n, reportedAt: BigInt(Date.now()) } });
    const topUp = await nextGrantOf(a, account, 'top-up after the report');
    // Spend taken as the whole grant: the lease is refilled to the target, a quarter of
    // (free 7 500 000 + held 2 500 000), never to the whole balance.
    t.equal(topUp.amountMicros, 5_000_000n, 'granted 2 500 000 + the target 2 500 000');
    t.equal((await storedBalance(pool, account)).outstanding, 5_000_000n);
    const warned = gateway.log.lines().filter((l) => l.leaseId === first.leaseId && l.from === 'LeaseReport');
    t.equal(warned.length, 1, 'the bounded report is logged at warn level');
    t.match(warned[0], { level: 40, nodeId: nodeA.id, accountId: account, grantedMicros: '2500000', spentMicros: '9000000000000', keptSpentMicros: '2500000', keptReservedMicros: '0' });

    const nodeB = await enrolledNode(pool, settings);
    const { conn: b } = await liveSession(t, gateway.server.port, identity.caPem, nodeB);
    const grantB = await nextGrantOf(b, account, 'grant of B');
    t.equal(grantB.amountMicros, 1_250_000n, 'B is leased a quarter of the 5 000 000 still free');

    a.send({ leaseReturn: { accountId: account, leaseId: first.leaseId, spentMicros: 0n, returnedMicros: 5_000_000n, reservedMicros: 0n, returnedAt: 0n, nodeStopping: true } });
    await nextOf(a, 'leaseReturnAck', 'return ack');
    const closed = await leaseRow(pool, first.leaseId);
    t.equal(closed.state, 'returned');
    t.equal(closed.returned, 2_500_000n, 'granted 5 000 000 − the 2 500 000 of spend the report was taken at');
    t.equal(closed.outstanding, 2_500_000n, 'kept for the records of that spend, no more');
    t.same(await storedBalance(pool, account), { balance: 10_000_000n, outstanding: 3_750_000n, spent: 0n });
    t.same((await checkLeaseInvariant(pool)).filter((x) => x.accountId === account), []);
    t.same((await checkLeaseReturns(pool)).filter((x) => x.accountId === account), []);
    t.same(await replayLedger(pool), []);
  });

  t.test('an honest node whose cost overshot its reservation is topped up to the target, not the target plus the overshoot', async (t) => {
    const account = await insertAccount(pool);
    const node = await insertNode(pool);
    await creditAccount(pool, account, 10_000_000n, null);
    const tx = <T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> => withTransaction(pool, fn);
    const lease = (await tx((c) => topUpLease(c, node, account, QUARTER_SHARE_POLICY, Date.now()))).lease!;
    t.equal(lease.granted, 2_500_000n);
    // Its requests cost 100 000 more than they reserved: the node's own figures say 2 600 000 spent.
    const outcome = await tx((c) => recordLeaseReport(c, node, { accountId: account, leaseId: lease.id, spentMicros: 2_600_000n, reservedMicros: 0n, reportedAt: BigInt(Date.now()) }));
    t.match(outcome?.beyondGrant, { grantedMicros: 2_500_000n, spentMicros: 2_600_000n, keptSpentMicros: 2_500_000n });
    const topUp = await tx((c) => topUpLease(c, node, account, QUARTER_SHARE_POLICY, Date.now()));
    t.equal(topUp.addedMicros, 2_500_000n, 'the target (a quarter of free 7 500 000 + held 2 500 000), not 2 600 000');
    t.equal(topUp.lease!.granted - 2_600_000n <= 2_500_000n, true, 'the node holds no more than the target by its own figures');
    t.same(await replayLedger(pool), []);
  });

  t.test('a lease whose settled costs passed its grant is topped up to the target, not the target plus the excess', async (t) => {
    const account = await insertAccount(pool);
    const node = await insertNode(pool);
    await creditAccount(pool, account, 10_000_000n, null);
    const tx = <T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> => withTransaction(pool, fn);
    const lease = (await tx((c) => topUpLease(c, node, account, QUARTER_SHARE_POLICY, Date.now()))).lease!;
    t.equal(lease.granted, 2_500_000n);
    // Two requests cost 1 300 000 each on 1 250 000 reserved: 2 600 000 settled, then reported.
    await tx((c) => settleIngestedRecords(c, node, [1, 2].map((i) => settledRecord(`settled-overshoot-${i}`, account, node, lease.id, 1_250_000, 1_300_000))));
    await tx((c) => recordLeaseReport(c, node, { accountId: account, leaseId: lease.id, spentMicros: 2_600_000n, reservedMicros: 0n, reportedAt: BigInt(Date.now()) }));
    // Free 7 400 000, held nothing (outstanding −100 000): the target is a quarter of 7 400 000.
    const topUp = await tx((c) => topUpLease(c, node, account, QUARTER_SHARE_POLICY, Date.now()));
    t.equal(topUp.addedMicros, 1_850_000n, 'the target, not 1 950 000');
    t.same(await replayLedger(pool), []);
  });

  t.test('a lease whose stored report an earlier release left past its grant is topped up to the target only', async (t) => {
    const account = await insertAccount(pool);
    const node = await insertNode(pool);
    await creditAccount(pool, account, 10_000_000n, null);
    const tx = <T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> => withTransaction(pool, fn);
    const lease = (await tx((c) => topUpLease(c, node, account, QUARTER_SHARE_POLICY, Date.now()))).lease!;
    // The figures a report of 9 000 000 000 000 spent left before reports were bounded by the grant.
    await pool.query(
      `update credit_leases set reported_spent_micros = 9000000000000, reported_reserved_micros = 0,
              reported_remaining_micros = granted_micros - 9000000000000, reported_at = now() where id = $1`,
      [lease.id],
    );
    const topUp = await tx((c) => topUpLease(c, node, account, QUARTER_SHARE_POLICY, Date.now()));
    t.equal(topUp.addedMicros, 2_500_000n, 'the target, not the whole free 7 500 000');
    t.same(await replayLedger(pool), []);
  });
});
