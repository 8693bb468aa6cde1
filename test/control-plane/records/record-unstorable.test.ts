// A record PostgreSQL (or the partition code) cannot store must not fail its batch: the batch
// failed on every resend, so the node's backlog stopped at it for good. A time past year 9999 is
// refused by the schema and set aside; a record that passes the schema but still fails to store is
// found by ingesting the batch again record by record and set aside too. The rest of the batch is
// stored and acked, and a resend stores nothing twice. An unavailable database still fails the batch.
import t from 'tap';
import { MAX_RECORD_UNIX_MS } from '../../../proto/src/index.js';
import type { NodeMessage, RecordBatchAck, RequestRecord } from '../../../proto/src/index.js';
import { recordBatchHandler } from '../../../control-plane/src/records/record-batch-handler.js';
import { ingestRecords } from '../../../control-plane/src/records/record-ingestion.js';
import { createPool } from '../../../control-plane/src/db/pool.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { migratedPool } from '../nodes-harness.js';
import { captureLogger, testSettings } from '../helpers.js';
import { insertAccount, insertNode } from '../billing/billing-fixtures.js';
import { record } from '../../edge-node/spool/spool-helpers.js';
import { ackOf } from './record-batch-ack.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const settings = testSettings(db.url);
const handler = recordBatchHandler({ pool, logger: captureLogger(settings).logger, settings });
const NODE = { nodeId: 'node-unstorable-0001', nodeName: 'edge-u', sessionId: 's-1' };

/** A day ago, on a whole second: within the window around now the batch handler ingests in. */
const GOOD_AT = Math.floor(Date.now() / 1000) * 1000 - 86_400_000;
const YEAR_10000 = Date.UTC(10000, 0, 1, 12, 0, 0);
/** Past the last date JavaScript can represent (8.64e15 ms), still a safe integer. */
const BEYOND_DATE = 8_700_000_000_000_000;

const at = (requestId: string, receivedAt: number, extra: Partial<RequestRecord> = {}): RequestRecord =>
  record(requestId, { nodeId: NODE.nodeId, receivedAt, finishedAt: receivedAt, ...extra });

const entries = (records: RequestRecord[]): Array<{ requestId: string; recordJson: Buffer }> =>
  records.map((r) => ({ requestId: r.requestId, recordJson: Buffer.from(JSON.stringify(r)) }));

async function deliver(batchId: string, records: RequestRecord[]): Promise<RecordBatchAck> {
  const message: NodeMessage = { recordBatch: { batchId, records: entries(records), firstSequence: 1n, lastSequence: BigInt(records.length) } };
  return ackOf(handler, NODE, message);
}

async function stored(ids: string[]): Promise<string[]> {
  const { rows } = await pool.query<{ request_id: string }>('select request_id from request_records where request_id = any($1) order by request_id', [ids]);
  return rows.map((r) => r.request_id);
}

async function setAside(ids: string[]): Promise<Array<{ request_id: string; reason: string; detail: string; record_text: string | null }>> {
  const { rows } = await pool.query<{ request_id: string; reason: string; detail: string; record_text: string | null }>(
    'select request_id, reason, detail, record_text from rejected_request_records where request_id = any($1) order by request_id',
    [ids],
  );
  return rows;
}

t.test('a time past year 9999 is set aside as invalid; the batch is stored and acked, and a resend stores nothing twice', async (t) => {
  const good = at('time-good', GOOD_AT);
  const late = at('time-year-10000', YEAR_10000);
  const beyond = at('time-beyond-date', BEYOND_DATE);
  const ids = [good.requestId, late.requestId, beyond.requestId];

  t.match(await deliver('time-1', [good, late, beyond]), { batchId: 'time-1', lastSequence: 3n, acceptedCount: 1, duplicateCount: 0, rejectedCount: 2 });
  t.same(await stored(ids), ['time-good'], 'the good record is stored');
  const rejected = await setAside(ids);
  t.same(rejected.map((r) => [r.request_id, r.reason]), [['time-beyond-date', 'invalid_record'], ['time-year-10000', 'invalid_record']], 'the others are set aside');
  t.match(rejected[0]?.detail, /receivedAt/, 'naming the field');
  t.notOk(rejected.some((r) => r.detail.includes(String(YEAR_10000)) || r.detail.includes(String(BEYOND_DATE))), 'not its value');
  t.equal(rejected[1]?.record_text, JSON.stringify(late), 'kept as sent');

  t.match(await deliver('time-2', [good, late, beyond]), { acceptedCount: 0, duplicateCount: 1, rejectedCount: 2 }, 'a resend is acked too');
  t.same(await stored(ids), ['time-good'], 'nothing stored twice');
  t.equal((await setAside(ids)).length, 2, 'nor set aside twice');
});

t.test('the last moment a record may carry (December 9999) is stored in its partition, but a node sending it has it set aside', async (t) => {
  const last = at('time-last-moment', MAX_RECORD_UNIX_MS);
  // Far ahead of the control plane's clock: the gateway makes no partition for it.
  t.match(await deliver('last-1', [last]), { acceptedCount: 0, rejectedCount: 1 });
  t.same((await setAside([last.requestId])).map((r) => r.reason), ['received_at_out_of_range']);
  // Ingested without that window, the partition code still writes December 9999's bounds.
  t.match(await ingestRecords(pool, NODE, [last]), { accepted: 1 });
  const { rows } = await pool.query<{ part: string; ms: string }>(
    "select tableoid::regclass::text as part, (extract(epoch from received_at) * 1000)::bigint::text as ms from request_records where request_id = 'time-last-moment'",
  );
  t.same(rows, [{ part: 'request_records_p999912', ms: String(MAX_RECORD_UNIX_MS) }]);
});

t.test('a record that passes the checks but cannot be stored is set aside; the others are ingested and settled once', async (t) => {
  // Records as ingestRecords gets them after the batch handler's checks: one with a time JavaScript
  // cannot make a date of (a RangeError building the partition), one PostgreSQL refuses (a
  // fractional time for its bigint column: SQLSTATE 22P02).
  const node = { nodeId: await insertNode(pool), nodeName: 'edge-billed' };
  const account = await insertAccount(pool);
  const good = at('store-good', GOOD_AT, { nodeId: node.nodeId, accountId: account, cost: { reservedMicros: 0, costMicros: 700, leaseId: null, priced: true } });
  const noDate = at('store-no-date', BEYOND_DATE, { nodeId: node.nodeId });
  const fractional = at('store-fractional', GOOD_AT + 0.5, { nodeId: node.nodeId });
  const ids = [good.requestId, noDate.requestId, fractional.requestId];
  const asSent = Buffer.from(`${JSON.stringify(fractional)}\n`);
  const batch = { batchId: 'store-1', rejected: [], sent: new Map([[fractional.requestId, asSent]]) };

  const first = await ingestRecords(pool, node, [good, noDate, fractional], batch);
  t.match(first, { accepted: 1, duplicates: 0, rejected: 2, rejectedStored: 2 });
  t.same(await stored(ids), ['store-good'], 'the good record is stored');
  const ledger = await pool.query<{ n: number }>('select count(*)::int as n from billing_ledger where request_id = $1', [good.requestId]);
  t.equal(ledger.rows[0]?.n, 1, 'and settled');
  const rejected = await setAside(ids);
  t.same(rejected.map((r) => [r.request_id, r.reason]), [['store-fractional', 'invalid_record'], ['store-no-date', 'invalid_record']], 'the others are set aside');
  t.match(rejected[0]?.detail, /SQLSTATE 22P02/, 'with the SQLSTATE');
  t.match(rejected[1]?.detail, /RangeError/, 'or the error class');
  t.notOk(rejected.some((r) => /\d{10}/.test(r.detail)), 'and none of its values');
  t.equal(rejected[0]?.record_text, asSent.toString('utf8'), 'kept as the node sent it');

  const again = await ingestRecords(pool, node, [good, noDate, fractional], { ...batch, batchId: 'store-2' });
  t.match(again, { accepted: 0, duplicates: 1, rejected: 2, rejectedStored: 0 }, 'a resend is recognised');
  t.same(await stored(ids), ['store-good'], 'nothing stored twice');
  t.equal((await setAside(ids)).length, 2, 'nor set aside twice');
  const ledgerAgain = await pool.query<{ n: number }>('select count(*)::int as n from billing_ledger where request_id = $1', [good.requestId]);
  t.equal(ledgerAgain.rows[0]?.n, 1, 'nor charged twice');
});

t.test("a record whose request id another node's record holds is set aside in the record-by-record ingestion too", async (t) => {
  const other = { nodeId: 'node-unstorable-0002', nodeName: 'edge-o' };
  t.match(await ingestRecords(pool, other, [at('bytwo-taken', GOOD_AT, { nodeId: other.nodeId })]), { accepted: 1 });
  // A record that cannot be stored sends the batch record by record.
  const taken = at('bytwo-taken', GOOD_AT);
  const good = at('bytwo-good', GOOD_AT);
  const noDate = at('bytwo-no-date', BEYOND_DATE);
  const ids = [taken.requestId, good.requestId, noDate.requestId];
  const result = await ingestRecords(pool, NODE, [taken, good, noDate], { batchId: 'bytwo-1', rejected: [] });
  t.match(result, { accepted: 1, duplicates: 0, rejected: 2, rejectedStored: 2 });
  const rejected = await setAside(ids);
  t.same(rejected.map((r) => [r.request_id, r.reason]), [['bytwo-no-date', 'invalid_record'], ['bytwo-taken', 'request_id_taken']]);
  t.match(rejected[1]?.detail, other.nodeId, 'naming the node that holds the id');
  t.match(await ingestRecords(pool, NODE, [taken, good, noDate], { batchId: 'bytwo-2', rejected: [] }), { accepted: 0, duplicates: 1, rejected: 2, rejectedStored: 0 }, 'a resend stores nothing twice');
});

t.test('the database failing while the batch is ingested record by record fails the batch: nothing stored, no ack', async (t) => {
  // A pool of its own whose clients lose their connection at the first savepoint.
  const failing = createPool({ databaseUrl: db.url });
  t.teardown(() => failing.end());
  const connect = failing.connect.bind(failing);
  failing.connect = (async () => {
    const client = await connect();
    const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
    client.query = ((...args: unknown[]) => {
      if (typeof args[0] === 'string' && args[0].startsWith('savepoint')) {
        return Promise.reject(Object.assign(new Error('Connection terminated unexpectedly'), { code: 'ECONNRESET' }));
      }
      return query(...args);
    }) as typeof client.query;
    return client;
  }) as typeof failing.connect;

  const good = at('down-good', GOOD_AT);
  const noDate = at('down-no-date', BEYOND_DATE);
  await t.rejects(ingestRecords(failing, NODE, [good, noDate]), /Connection terminated/);
  t.same(await stored([good.requestId, noDate.requestId]), [], 'nothing stored');
  t.same(await setAside([good.requestId, noDate.requestId]), [], 'nothing set aside');
});
