// The lease book is charged a request's cost only after the request's record is committed to the
// spool. Charged before (at the settle stage), a kill -9 between the two writes left a lease that had
// spent the cost next to a request recovered as `interrupted` with cost 0: answered, never charged.
// Real parts: the spool is a SpoolStore on a temp file whose commits fail with a real SQLITE_FULL
// (max_page_count) while the record waits, and the lease book is credit-leases.sqlite, read back
// from disk by another connection, as a restarted node would read it.
import path from 'node:path';
import Database from 'better-sqlite3';
import { pino } from 'pino';
import t from 'tap';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { LEASE_DB_FILE, openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import { quietLogger, tempStateDir } from '../spool/spool-helpers.js';

function onDisk(file: string, sql: string): unknown[] {
  const db = new Database(file, { readonly: true });
  try {
    return db.prepare(sql).all();
  } finally {
    db.close();
  }
}

t.test('a request\'s cost reaches the lease book only after its record is committed, and then exactly once', async (t) => {
  const dir = tempStateDir(t);
  const leaseFile = path.join(dir, LEASE_DB_FILE);
  const spoolFile = path.join(dir, 'spool.db');
  const leaseStore = openLeaseStore(dir, { nodeId: 'node-1' });
  const book = new LeaseBook(leaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 10_000_000, expiresAt: Date.now() + 600_000 });
  const credit = new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' }));
  const spool = new SpoolStore({
    file: spoolFile,
    meta: createSpoolFile(spoolFile, 'node-1'),
    logger: quietLogger(),
    limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }),
    retryMs: 20,
  });
  t.teardown(async () => {
    await spool.close();
    leaseStore.close();
  });
  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: () => ({ prices: [{ model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 1, requestMicros: 0 }] }),
    services: { credit, spool },
  });
  const lease = (): { spent: number; reserved: number } =>
    onDisk(leaseFile, "select spent, reserved from leases where lease_id = 'lease-1'")[0] as { spent: number; reserved: number };
  t.same(lease(), { spent: 0, reserved: 0 });

  // The open row (small) still fits the file; the record, with its 100 KB prompt, cannot.
  const pages = (spool.writerPragma('page_count') as Array<{ page_count: number }>)[0]!.page_count;
  spool.writerPragma(`max_page_count = ${pages}`);
  let answered = false;
  const answer = node
    .client()
    .chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'x '.repeat(50_000) }], max_tokens: 16 })
    .then((a) => {
      answered = true;
      return a;
    });
  await waitFor(() => spool.pending().writeFailing && spool.pending().finals === 1, { what: 'the record to wait for a commit that fails with SQLITE_FULL' });
  t.equal(upstream.requests.length, 1, 'the upstream answered: settle has run');
  const held = lease();
  t.ok(held.reserved > 0, 'the reservation is still held on disk');
  t.equal(held.spent, 0, 'no cost on disk while the record that carries it is not committed');
  t.equal(answered, false, 'the caller has not had its last byte');
  t.same(onDisk(spoolFile, 'select request_id from records'), [], 'no record committed yet');

  spool.writerPragma('max_page_count = 1073741823');
  const reply = await answer;
  t.ok(reply.choices[0]?.message.content, 'answered once the record is committed');
  const [row] = onDisk(spoolFile, 'select record_json from records') as Array<{ record_json: string }>;
  const recorded = JSON.parse(row!.record_json) as { cost: { costMicros: number; reservedMicros: number } };
  t.ok(recorded.cost.costMicros > 0, 'the record carries the cost');
  t.equal(recorded.cost.reservedMicros, held.reserved, 'and the reservation that was held');
  await waitFor(() => lease().reserved === 0, { what: 'the end of the request to charge the lease' });
  t.same(lease(), { spent: recorded.cost.costMicros, reserved: 0 }, 'the lease is charged the recorded cost, once');
});
