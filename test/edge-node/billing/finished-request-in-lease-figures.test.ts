// A request that finished (its record stamped finishedAt) but is not charged yet — its record's
// commit still under way — when the node reports or returns its lease: the figures count it as
// spent at its cost, as its record says, so the control plane, closing the lease from them, keeps
// its cost and not its reservation. Counted reserved, the record (finishedAt before the figures'
// time: not in flight at the cutoff) released nothing, and reserved − cost stayed outstanding on the
// closed lease until the hold bound (the lease TTL, 30 days by default).
// Real parts: the node's lease book in credit-leases.sqlite, a SpoolStore whose commit fails with a
// real SQLITE_FULL while the record waits (the window between finishedAt and the charge), the node's
// credit channel, and the control plane's lease handler and settlement on real PostgreSQL.
import path from 'node:path';
import Database from 'better-sqlite3';
import type pg from 'pg';
import { pino } from 'pino';
import t from 'tap';
import type { Test } from 'tap';
import type { NodeMessage, RequestRecord } from '../../../proto/src/index.js';
import { creditAccount } from '../../../control-plane/src/billing/account-credits.js';
import { topUpLease } from '../../../control-plane/src/billing/credit-leases.js';
import type { LeasePolicy } from '../../../control-plane/src/billing/lease-policy.js';
import { createLeaseStreamHandler } from '../../../control-plane/src/billing/lease-stream-handler.js';
import { settleIngestedRecords } from '../../../control-plane/src/billing/settlement.js';
import { withTransaction } from '../../../control-plane/src/nodes/with-transaction.js';
import { CreditChannel } from '../../../edge-node/src/billing/credit-channel.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { LEASE_DB_FILE, openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { insertAccount, insertNode, storedBalance } from '../../control-plane/billing/billing-fixtures.js';
import { migratedPool } from '../../control-plane/nodes-harness.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { bundleKey } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import { quietLogger, tempStateDir } from '../spool/spool-helpers.js';

const HOUR = 3_600_000;
// The whole balance in one lease: no top-up changes the lease while the test looks at it.
const POLICY: LeasePolicy = { capMicros: 1_000_000_000n, sharePpm: 1_000_000n, ttlMs: HOUR, refreshMs: HOUR };
// Output dear and the answer short (the upstream echoes the last user message): most of the reservation goes unused.
const PRICE = { model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 1_000, requestMicros: 0 };

function onDisk(file: string, sql: string): unknown[] {
  const db = new Database(file, { readonly: true });
  try {
    return db.prepare(sql).all();
  } finally {
    db.close();
  }
}

interface InWindow {
  pool: pg.Pool;
  cpNodeId: string;
  accountId: string;
  leaseId: string;
  channel: CreditChannel;
  /** What the node sent on its control stream. */
  toControlPlane: NodeMessage[];
  /** The lease as the node's store has it. */
  nodeLease: () => { spent: number; reserved: number };
  /** Lets the record's commit through; resolves with the record once the request is charged. */
  finish: () => Promise<RequestRecord>;
}

/**
 * A control plane with a credited account and the node's lease of it, and the node with one priced
 * request in the window: answered by the upstream, its cost worked out and its record stamped, the
 * record's commit failing (SQLITE_FULL) so its charge has not happened.
 */
async function requestInWindow(t: Test): Promise<InWindow> {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);
  const accountId = await insertAccount(pool);
  const cpNodeId = await insertNode(pool);
  await creditAccount(pool, accountId, 10_000_000n, null);
  const granted = (await withTransaction(pool, (c) => topUpLease(c, cpNodeId, accountId, POLICY, Date.now()))).lease!;

  const dir = tempStateDir(t);
  const leaseStore = openLeaseStore(dir, { nodeId: 'node-1' });
  const book = new LeaseBook(leaseStore);
  book.grant({ accountId, leaseId: granted.id, amountMicros: Number(granted.granted), expiresAt: granted.expiresAt });
  const spoolFile = path.join(dir, 'spool.db');
  const spool = new SpoolStore({
    file: spoolFile,
    meta: createSpoolFile(spoolFile, 'node-1'),
    logger: quietLogger(),
    limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }),
    retryMs: 20,
  });
  const channel = new CreditChannel(book, { reportIntervalMs: HOUR, logger: quietLogger(), returnConfirmWaitMs: 10_000 });
  t.teardown(async () => {
    channel.stop();
    await spool.close();
    leaseStore.close();
  });
  const toControlPlane: NodeMessage[] = [];
  channel.onEstablished((m) => {
    toControlPlane.push(m);
    return true;
  }, { sessionId: 'node-session' });

  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (_base, keyHash) => ({
      accounts: [{ id: accountId, name: 'acme', status: 'active', limits: {} }],
      apiKeys: [bundleKey('key-a', keyHash, { accountId })],
      prices: [PRICE],
    }),
    services: { credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, quietLogger()), spool },
  });
  const leaseFile = path.join(dir, LEASE_DB_FILE);
  const nodeLease = (): { spent: number; reserved: number } =>
    onDisk(leaseFile, `select spent, reserved from leases where lease_id = '${granted.id}'`)[0] as { spent: number; reserved: number };

  // The open row (small) still fits the file; the record, with its 100 KB system prompt, cannot.
  const pages = (spool.writerPragma('page_count') as Array<{ page_count: number }>)[0]!.page_count;
  spool.writerPragma(`max_page_count = ${pages}`);
  const answer = node.client().chat.completions.create({
    model: 'echo',
    messages: [{ role: 'system', content: 'x '.repeat(50_000) }, { role: 'user', content: 'hi' }],
    max_tokens: 1_000,
  });
  await waitFor(() => spool.pending().writeFailing && spool.pending().finals === 1, { what: 'the record to wait for a commit that fails with SQLITE_FULL' });
  t.ok(nodeLease().reserved > 0, 'in the window: the reservation is still held on disk, the charge not made');
  t.equal(nodeLease().spent, 0);

  const finish = async (): Promise<RequestRecord> => {
    spool.writerPragma('max_page_count = 1073741823');
    await answer;
    await waitFor(() => nodeLease().reserved === 0, { what: 'the charge after the commit' });
    const [row] = onDisk(spoolFile, 'select record_json from records') as Array<{ record_json: string }>;
    return JSON.parse(row!.record_json) as RequestRecord;
  };
  return { pool, cpNodeId, accountId, leaseId: granted.id, channel, toControlPlane, nodeLease, finish };
}

/** The control plane's lease: what it still holds for the node (granted − spent − returned), and for requests in flight. */
async function controlPlaneLease(pool: pg.Pool, leaseId: string): Promise<{ state: string; outstanding: bigint; held: bigint; spent: bigint }> {
  const { rows } = await pool.query<{ state: string; outstanding: string; held: string; spent: string }>(
    `select state, (granted_micros - spent_micros - returned_micros)::text as outstanding, held_micros::text as held, spent_micros::text as spent
       from credit_leases where id = $1`,
    [leaseId],
  );
  const r = rows[0]!;
  return { state: r.state, outstanding: BigInt(r.outstanding), held: BigInt(r.held), spent: BigInt(r.spent) };
}

t.test('a lease returned while a finished request waits for its charge keeps its cost, not its reservation, on the control plane', async (t) => {
  const w = await requestInWindow(t);
  const controlPlane = createLeaseStreamHandler({ pool: w.pool, logger: pino({ level: 'silent' }), policy: POLICY });
  const cpNode = { nodeId: w.cpNodeId, nodeName: 'edge', sessionId: 'cp-session' };
  t.teardown(() => controlPlane.onEnded?.(cpNode));

  // The node stops: its return goes to the control plane, whose confirmation comes back.
  w.toControlPlane.length = 0;
  const returned = w.channel.returnAll();
  const leaseReturn = w.toControlPlane.find((m) => m.leaseReturn !== undefined)!.leaseReturn!;
  await controlPlane.handle(cpNode, { leaseReturn }, (m) => w.channel.onMessage(m));
  await returned;

  const record = await w.finish();
  t.ok(record.cost.reservedMicros > record.cost.costMicros, `the request reserved more than it cost (${record.cost.reservedMicros} > ${record.cost.costMicros})`);
  t.ok(record.finishedAt <= Number(leaseReturn.returnedAt), 'its record finished before the figures were taken: not in flight at the cutoff');
  t.equal(leaseReturn.reservedMicros, 0n, 'the return does not count the finished request as in flight');
  t.equal(leaseReturn.spentMicros, BigInt(record.cost.costMicros), 'but as spent, at its cost');

  await withTransaction(w.pool, (c) => settleIngestedRecords(c, w.cpNodeId, [record]));
  t.same(await controlPlaneLease(w.pool, w.leaseId), { state: 'returned', outstanding: 0n, held: 0n, spent: BigInt(record.cost.costMicros) },
    'the closed lease is charged the cost and holds nothing more');
  t.equal((await storedBalance(w.pool, w.accountId)).outstanding, 0n, 'nothing of the account waits for the hold bound');
  t.same(w.nodeLease(), { spent: record.cost.costMicros, reserved: 0 }, 'the node charged the same cost, once');
});

t.test('a lease that expires after a report taken while a finished request waits for its charge keeps its cost, not its reservation', async (t) => {
  const w = await requestInWindow(t);
  const controlPlane = createLeaseStreamHandler({ pool: w.pool, logger: pino({ level: 'silent' }), policy: POLICY });
  const cpNode = { nodeId: w.cpNodeId, nodeName: 'edge', sessionId: 'cp-session' };
  t.teardown(() => controlPlane.onEnded?.(cpNode));

  w.toControlPlane.length = 0;
  w.channel.reportAll();
  const leaseReport = w.toControlPlane.find((m) => m.leaseReport !== undefined)!.leaseReport!;
  await controlPlane.handle(cpNode, { leaseReport }, () => true);

  const record = await w.finish();
  t.ok(record.cost.reservedMicros > record.cost.costMicros, `the request reserved more than it cost (${record.cost.reservedMicros} > ${record.cost.costMicros})`);
  t.ok(record.finishedAt <= Number(leaseReport.reportedAt), 'its record finished before the figures were taken');
  t.same({ spent: leaseReport.spentMicros, reserved: leaseReport.reservedMicros }, { spent: BigInt(record.cost.costMicros), reserved: 0n },
    'the report counts it spent at its cost, not reserved');

  // The node is gone before its next report: the lease expires and is closed from that report.
  const { rows } = await w.pool.query<{ expires: string }>('select (extract(epoch from expires_at) * 1000)::bigint::text as expires from credit_leases where id = $1', [w.leaseId]);
  await withTransaction(w.pool, (c) => topUpLease(c, w.cpNodeId, w.accountId, POLICY, Number(rows[0]!.expires) + 1));
  await withTransaction(w.pool, (c) => settleIngestedRecords(c, w.cpNodeId, [record]));
  t.same(await controlPlaneLease(w.pool, w.leaseId), { state: 'returned', outstanding: 0n, held: 0n, spent: BigInt(record.cost.costMicros) },
    'the expired lease is charged the cost and holds nothing more');
});
