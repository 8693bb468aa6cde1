// A closed lease keeps the reservations of requests in flight at its close, and each of their
// records releases reserved − cost (docs/billing.md, "Closed leases"). On real PostgreSQL, over
// the real gRPC gateway: a LeaseReturn whose figures pass the lease's grant, or a close after
// settled costs passed it, never has those records give back more than the lease still held —
// its returns stay within its grant and its outstanding never goes below zero
// (docs/billing.md, "Node figures beyond the grant").
import t from 'tap';
import type pg from 'pg';
import type { RequestRecord } from '../../../proto/src/index.js';
import { creditAccount } from '../../../control-plane/src/billing/account-credits.js';
import { recordLeaseReport, returnLease, topUpLease } from '../../../control-plane/src/billing/credit-leases.js';
import { checkLeaseInvariant, checkLeaseReturns, replayLedger } from '../../../control-plane/src/billing/ledger-replay.js';
import { settleIngestedRecords } from '../../../control-plane/src/billing/settlement.js';
import { withTransaction } from '../../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { enrolledNode, gatewayIdentity, gatewaySettings, liveSession, migratedPool, startTestGateway } from '../gateway-harness.js';
import { insertAccount, insertNode, storedBalance } from './billing-fixtures.js';
import { QUARTER_SHARE_POLICY, leaseChargedRecord, leaseRow, nextGrantOf, nextOf } from './lease-figures-fixtures.js';

/** Node clock of the figures a close uses; records received before and finished after it were in flight. */
const CUTOFF = 1_700_000_000_000;

/** A record of the lease received 500 ms before `cutoff`: finished after it, it was in flight at the close. */
function record(requestId: string, accountId: string, nodeId: string, leaseId: string, reserved: number, cost: number, finishedAt = CUTOFF + 500, cutoff = CUTOFF): RequestRecord {
  return leaseChargedRecord(requestId, accountId, nodeId, leaseId, reserved, cost, { receivedAt: cutoff - 500, finishedAt });
}

t.test('closed leases release no more than their grant', async (t) => {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);
  const tx = <T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> => withTransaction(pool, fn);

  t.test('a lease return claiming reservations far beyond its grant holds at most the grant, and in-flight records release no more than it', async (t) => {
    const identity = await gatewayIdentity();
    const settings = gatewaySettings(db.url);
    const gateway = await startTestGateway(t, { pool, settings, identity });
    const account = await insertAccount(pool);
    await creditAccount(pool, account, 10_000_000n, null);
    const node = await enrolledNode(pool, settings);
    const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
    const grant = await nextGrantOf(conn, account, 'grant');
    t.equal(grant.amountMicros, 2_500_000n);

    const BIG = 9_000_000_000_000n;
    // Recent: ingestion sets aside records received long before the control plane's clock.
    const cutoff = Date.now() - 60_000;
    conn.send({ leaseReturn: { accountId: account, leaseId: grant.leaseId, spentMicros: BIG, returnedMicros: 0n, reservedMicros: BIG, returnedAt: BigInt(cutoff) } });
    await nextOf(conn, 'leaseReturnAck', 'return ack');
    const closed = await leaseRow(pool, grant.leaseId);
    t.equal(closed.held, 2_500_000n, 'held no more than the lease holds');
    const warned = gateway.log.lines().filter((l) => l.leaseId === grant.leaseId && l.from === 'LeaseReturn');
    t.match(warned, [{ level: 40, nodeId: node.id, grantedMicros: '2500000', reservedMicros: String(BIG), keptSpentMicros: '0', keptReservedMicros: '2500000' }]);

    const records = [1, 2, 3].map((i) => record(`held-beyond-${i}-${node.id}`, account, node.id, grant.leaseId, 5_000_000, 0, cutoff + 500, cutoff));
    conn.send({
      recordBatch: {
        batchId: 'held-beyond', firstSequence: 1n, lastSequence: 3n,
        records: records.map((r) => ({ requestId: r.requestId, recordJson: Buffer.from(JSON.stringify(r)) })),
      },
    });
    await nextOf(conn, 'recordBatchAck', 'batch ack');
    const { rows: stored } = await pool.query<{ n: string }>('select count(*)::text as n from request_records where node_id = $1', [node.id]);
    t.equal(stored[0]!.n, '3', 'the records were ingested');
    const after = await leaseRow(pool, grant.leaseId);
    t.equal(after.returned, 2_500_000n, 'the in-flight records released the grant, not 3 × 5 000 000');
    t.equal(after.outstanding, 0n);
    t.equal(after.held, 0n);
    t.same(await storedBalance(pool, account), { balance: 10_000_000n, outstanding: 0n, spent: 0n });
    t.same((await checkLeaseReturns(pool)).filter((x) => x.accountId === account), []);
    t.same((await checkLeaseInvariant(pool)).filter((x) => x.accountId === account), []);
    t.same(await replayLedger(pool), []);
  });

  t.test('a lease closed after its settled costs passed its grant holds nothing for in-flight records', async (t) => {
    const account = await insertAccount(pool);
    const node = await insertNode(pool);
    await creditAccount(pool, account, 10_000_000n, null);
    const lease = (await tx((c) => topUpLease(c, node, account, QUARTER_SHARE_POLICY, Date.now()))).lease!;
    t.equal(lease.granted, 2_500_000n);
    // Costs overshot their reservations: 2 600 000 settled on a 2 500 000 grant, and reported.
    const done = [1, 2].map((i) => record(`overshoot-${i}`, account, node, lease.id, 1_250_000, 1_300_000, CUTOFF - 1_000));
    await tx((c) => settleIngestedRecords(c, node, done));
    await tx((c) => recordLeaseReport(c, node, { accountId: account, leaseId: lease.id, spentMicros: 2_600_000n, reservedMicros: 0n, reportedAt: BigInt(CUTOFF - 900) }));
    // The node returns with one request of 100 000 reserved still in flight.
    const given = await tx((c) => returnLease(c, node, account, lease.id, 2_500_000n, 100_000n, CUTOFF));
    t.equal(given, 0n);
    const closed = await leaseRow(pool, lease.id);
    t.equal(closed.outstanding, -100_000n, 'the overshoot');
    t.equal(closed.held, 0n, 'nothing held: the lease holds nothing');
    const settled = await tx((c) => settleIngestedRecords(c, node, [record('in-flight-late', account, node, lease.id, 100_000, 0)]));
    t.equal(settled.released, 0, 'the in-flight record released nothing');
    const after = await leaseRow(pool, lease.id);
    t.equal(after.returned, 0n);
    t.equal(after.outstanding, -100_000n, 'no return took it further below zero');
    t.same(await storedBalance(pool, account), { balance: 7_400_000n, outstanding: -100_000n, spent: 2_600_000n });
    t.same(await replayLedger(pool), []);
  });

  t.test('an in-flight record of a closed lease releases no more than the lease still holds once later costs took part of what it held', async (t) => {
    const account = await insertAccount(pool);
    const node = await insertNode(pool);
    await creditAccount(pool, account, 10_000_000n, null);
    const lease = (await tx((c) => topUpLease(c, node, account, QUARTER_SHARE_POLICY, Date.now()))).lease!;
    t.equal(lease.granted, 2_500_000n);
    // The node returns: 500 000 spent, 1 000 000 held by a request in flight; 1 000 000 goes back.
    t.equal(await tx((c) => returnLease(c, node, account, lease.id, 1_500_000n, 1_000_000n, CUTOFF)), 1_000_000n);
    const { granted, returned, outstanding, held } = await leaseRow(pool, lease.id);
    t.same({ granted, returned, outstanding, held }, { granted: 2_500_000n, returned: 1_000_000n, outstanding: 1_500_000n, held: 1_000_000n });
    // A record finished before the cutoff costs 1 200 000, more than the 500 000 the node counted.
    await tx((c) => settleIngestedRecords(c, node, [record('finished-before', account, node, lease.id, 1_200_000, 1_200_000, CUTOFF - 1_000)]));
    t.equal((await leaseRow(pool, lease.id)).outstanding, 300_000n);
    const settled = await tx((c) => settleIngestedRecords(c, node, [record('in-flight-after-late-cost', account, node, lease.id, 1_000_000, 0)]));
    t.equal(settled.released, 1);
    const after = await leaseRow(pool, lease.id);
    t.equal(after.returned, 1_300_000n, 'the 300 000 the lease still held went back, not the whole 1 000 000 reservation');
    t.equal(after.outstanding, 0n, 'never below zero by a return');
    t.equal(after.held, 0n);
    t.same(await storedBalance(pool, account), { balance: 8_800_000n, outstanding: 0n, spent: 1_200_000n });
    t.same(await replayLedger(pool), []);
  });
});
