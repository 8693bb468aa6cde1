// Ingestion of record batches from nodes: idempotent by request id (a batch twice, a resend with
// other boundaries, two replicas at once), monthly partitions created on demand, malformed batches
// refused without writing anything, records that cannot be ingested set aside (record-rejection.test.ts).
import t from 'tap';
import type { NodeMessage, RecordBatchAck, RequestRecord } from '../../../proto/src/index.js';
import { NodeMessageInvalid } from '../../../control-plane/src/gateway/node-stream-handler.js';
import { recordBatchHandler } from '../../../control-plane/src/records/record-batch-handler.js';
import { ingestRecords } from '../../../control-plane/src/records/record-ingestion.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { migratedPool } from '../nodes-harness.js';
import { captureLogger, testSettings } from '../helpers.js';
import { record } from '../../edge-node/spool/spool-helpers.js';
import { ackOf } from './record-batch-ack.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const settings = testSettings(db.url);
const handler = recordBatchHandler({ pool, logger: captureLogger(settings).logger, settings });
const NODE = { nodeId: 'node-spool-test-0001', nodeName: 'edge-a', sessionId: 's-1' };
/** Two days ago, on a whole second: the batch handler ingests records received within its window around now. */
const RECENT = Math.floor(Date.now() / 1000) * 1000 - 2 * 86_400_000;

let batchNo = 0;
function batchOf(records: RequestRecord[], overrides: Partial<NonNullable<NodeMessage['recordBatch']>> = {}): NodeMessage {
  batchNo += 1;
  return {
    recordBatch: {
      batchId: `batch-${batchNo}`,
      records: records.map((r) => ({ requestId: r.requestId, recordJson: Buffer.from(JSON.stringify(r)) })),
      firstSequence: 1n,
      lastSequence: BigInt(records.length),
      ...overrides,
    },
  };
}

function deliver(message: NodeMessage, node = NODE): Promise<RecordBatchAck> {
  return ackOf(handler, node, message);
}

async function count(prefix: string): Promise<number> {
  const r = await pool.query<{ n: string }>('select count(*) as n from request_records where request_id like $1', [`${prefix}%`]);
  return Number(r.rows[0]!.n);
}

const records = (prefix: string, n: number, extra: Partial<RequestRecord> = {}): RequestRecord[] =>
  Array.from({ length: n }, (_, i) => record(`${prefix}-${i}`, { nodeId: NODE.nodeId, receivedAt: RECENT + i * 1000, finishedAt: RECENT + i * 1000 + 50, ...extra }));

t.test('a batch ingested twice is stored once and its second ack counts duplicates', async (t) => {
  const batch = batchOf(records('twice', 20));
  const first = await deliver(batch);
  t.match(first, { batchId: batch.recordBatch!.batchId, lastSequence: 20n, acceptedCount: 20, duplicateCount: 0 });
  const second = await deliver(batch);
  t.match(second, { acceptedCount: 0, duplicateCount: 20 });
  t.equal(await count('twice-'), 20);
});

t.test('a resend after a lost ack with other batch boundaries counts only the new records', async (t) => {
  const all = records('resend', 30);
  await deliver(batchOf(all.slice(0, 10)));
  // The ack of a second batch was lost; the node resends from row 11 in one bigger batch.
  await deliver(batchOf(all.slice(10, 20)));
  const ack = await deliver(batchOf(all.slice(10, 30), { firstSequence: 11n, lastSequence: 30n }));
  t.match(ack, { lastSequence: 30n, acceptedCount: 10, duplicateCount: 10 });
  t.equal(await count('resend-'), 30);
});

t.test('two replicas ingesting the same batch at once store each record once', async (t) => {
  const batch = records('race', 50);
  const [a, b] = await Promise.all([ingestRecords(pool, NODE, batch), ingestRecords(pool, NODE, batch)]);
  t.equal(a.accepted + b.accepted, 50);
  t.equal(a.duplicates + b.duplicates, 50);
  t.equal(await count('race-'), 50);
});

t.test('records land in monthly partitions created on demand', async (t) => {
  // The last millisecond of last month and the first of this one (both within the handler's window).
  const now = new Date();
  const monthStart = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1);
  const partOf = (ms: number): string => `request_records_p${new Date(ms).toISOString().slice(0, 7).replace('-', '')}`;
  const prev = records('prev', 2, { receivedAt: monthStart - 1, finishedAt: monthStart });
  const current = records('this', 1, { receivedAt: monthStart, finishedAt: monthStart + 1000 });
  await deliver(batchOf([...prev, ...current]));
  const rows = await pool.query<{ request_id: string; part: string }>(
    "select request_id, tableoid::regclass::text as part from request_records where request_id like 'prev-%' or request_id like 'this-%' order by request_id",
  );
  t.same(rows.rows, [
    { request_id: 'prev-0', part: partOf(monthStart - 1) },
    { request_id: 'prev-1', part: partOf(monthStart - 1) },
    { request_id: 'this-0', part: partOf(monthStart) },
  ]);
});

t.test('a record of another node is not ingested: it is set aside and the rest of its batch is stored', async (t) => {
  const batch = [...records('foreign-ok', 2), record('foreign-bad', { nodeId: 'someone-else' })];
  t.match(await deliver(batchOf(batch)), { acceptedCount: 2, rejectedCount: 1 });
  t.equal(await count('foreign-'), 2);
  const rejected = await pool.query("select reason from rejected_request_records where request_id = 'foreign-bad'");
  t.same(rejected.rows, [{ reason: 'foreign_node' }]);
});

t.test("a record whose request id another node's record holds is set aside naming that node, not acked as a duplicate, and set aside once however often it is resent", async (t) => {
  // Any enrolled node can send a record with its own node id and another node's request id (the
  // x-request-id that node's callers saw) before that node backfills its real record.
  const other = { nodeId: 'node-spool-test-0002', nodeName: 'edge-b', sessionId: 's-2' };
  const at = RECENT + 3_600_000;
  const first = record('taken-id', { nodeId: other.nodeId, receivedAt: at, finishedAt: at + 10, model: 'first-model' });
  t.match(await deliver(batchOf([first]), other), { acceptedCount: 1 });

  const real = record('taken-id', { nodeId: NODE.nodeId, receivedAt: at, finishedAt: at + 50, model: 'real-model' });
  const alongside = record('taken-alongside', { nodeId: NODE.nodeId, receivedAt: at, finishedAt: at + 5 });
  const batch = batchOf([real, alongside]);
  t.match(await deliver(batch), { acceptedCount: 1, duplicateCount: 0, rejectedCount: 1 }, 'counted as rejected, the rest of the batch ingested');
  const stored = await pool.query("select request_id, node_id from request_records where request_id like 'taken-%' order by request_id");
  t.same(stored.rows, [{ request_id: 'taken-alongside', node_id: NODE.nodeId }, { request_id: 'taken-id', node_id: other.nodeId }], 'the record holding the id is untouched');
  const setAside = 'select node_id, reason, detail, record_text from rejected_request_records where request_id = $1';
  const rejected = await pool.query<{ node_id: string; reason: string; detail: string; record_text: string }>(setAside, ['taken-id']);
  t.equal(rejected.rows.length, 1);
  t.match(rejected.rows[0], { node_id: NODE.nodeId, reason: 'request_id_taken', record_text: JSON.stringify(real) }, 'kept as sent, under the node that sent it');
  t.match(rejected.rows[0]?.detail, other.nodeId, 'naming the node that holds the id');
  t.notMatch(rejected.rows[0]?.detail, /model/, 'and no record values');

  t.match(await deliver(batch), { acceptedCount: 0, duplicateCount: 1, rejectedCount: 1 }, 'a resend is rejected again');
  t.equal((await pool.query(setAside, ['taken-id'])).rows.length, 1, 'and not set aside twice');
  t.match(await deliver(batchOf([first]), other), { acceptedCount: 0, duplicateCount: 1, rejectedCount: 0 }, "the holder's own resend is still a duplicate");
});

t.test('a record that is not JSON or not a request record is set aside; a malformed batch is refused', async (t) => {
  const bad: NodeMessage = { recordBatch: { batchId: 'b-bad', records: [{ requestId: 'x', recordJson: Buffer.from('{nope') }], firstSequence: 1n, lastSequence: 1n } };
  t.match(await deliver(bad), { acceptedCount: 0, rejectedCount: 1 });
  const wrong = batchOf([{ ...record('wrong-shape'), status: 'great' as never }]);
  t.match(await deliver(wrong), { acceptedCount: 0, rejectedCount: 1 });
  const mismatch: NodeMessage = { recordBatch: { batchId: 'b-mm', records: [{ requestId: 'other-id', recordJson: Buffer.from(JSON.stringify(record('real-id'))) }], firstSequence: 1n, lastSequence: 1n } };
  t.match(await deliver(mismatch), { acceptedCount: 0, rejectedCount: 1 });
  await t.rejects(deliver({ recordBatch: { batchId: '', records: [], firstSequence: 1n, lastSequence: 1n } }), NodeMessageInvalid);
  await t.rejects(deliver({ recordBatch: { batchId: 'b-seq', records: [{ requestId: 'y', recordJson: Buffer.from('{}') }], firstSequence: 2n, lastSequence: 1n } }), /lastSequence is before firstSequence/);
  t.equal(await count('wrong-shape'), 0);
  const reasons = await pool.query<{ request_id: string; reason: string }>("select request_id, reason from rejected_request_records where request_id in ('x', 'wrong-shape', 'other-id') order by request_id");
  t.same(reasons.rows, [{ request_id: 'other-id', reason: 'request_id_mismatch' }, { request_id: 'wrong-shape', reason: 'invalid_record' }, { request_id: 'x', reason: 'not_json' }]);
});

t.test("every column of an ingested row is the record's own value, nulls included, and the stored record is the record", async (t) => {
  const full = record('columns-full', {
    nodeId: NODE.nodeId, receivedAt: RECENT + 7_200_123, finishedAt: RECENT + 7_201_456,
    keyId: 'key-9', accountId: 'acct-9', model: 'gpt-x "quoted" \\ ü', api: 'messages', status: 'failed', httpStatus: 502,
    errorCode: 'ZN_ERR_UPSTREAM_UNAVAILABLE', usage: { inputTokens: 12_345_678_901, outputTokens: 7, estimated: true },
    cost: { reservedMicros: 5_000, costMicros: 0, leaseId: null, priced: false },
  });
  const bare = record('columns-bare', { nodeId: NODE.nodeId, receivedAt: RECENT + 7_202_000, finishedAt: RECENT + 7_202_000, keyId: null, accountId: null, model: null, errorCode: null, status: 'rejected', httpStatus: 401 });
  await deliver(batchOf([full, bare]));
  const { rows } = await pool.query<Record<string, unknown>>(
    `select request_id, (extract(epoch from received_at) * 1000)::bigint as received_ms, (extract(epoch from finished_at) * 1000)::bigint as finished_ms,
            node_id, node_name, key_id, account_id, model, api, status, http_status, error_code, input_tokens, output_tokens, cost_micros, record
       from request_records where request_id like 'columns-%' order by request_id`,
  );
  t.same(rows[0], {
    request_id: 'columns-bare', received_ms: String(bare.receivedAt), finished_ms: String(bare.finishedAt), node_id: NODE.nodeId, node_name: NODE.nodeName,
    key_id: null, account_id: null, model: null, api: bare.api, status: 'rejected', http_status: 401, error_code: null,
    input_tokens: String(bare.usage.inputTokens), output_tokens: String(bare.usage.outputTokens), cost_micros: String(bare.cost.costMicros), record: bare,
  });
  t.same(rows[1], {
    request_id: 'columns-full', received_ms: String(full.receivedAt), finished_ms: String(full.finishedAt), node_id: NODE.nodeId, node_name: NODE.nodeName,
    key_id: 'key-9', account_id: 'acct-9', model: 'gpt-x "quoted" \\ ü', api: 'messages', status: 'failed', http_status: 502, error_code: 'ZN_ERR_UPSTREAM_UNAVAILABLE',
    input_tokens: '12345678901', output_tokens: '7', cost_micros: '0', record: full,
  });
});

t.test('NUL characters and unpaired surrogates are stored as U+FFFD, and their batch and the records in it get through', async (t) => {
  const at = RECENT + 10_800_000;
  const odd = record('text-odd-\u0000-id', {
    nodeId: NODE.nodeId, receivedAt: at, finishedAt: at + 5, model: 'gpt\u0000x',
    bodies: { request: '{"model":"gpt\\u0000x"}', response: 'a\ud800b \udc00 ok \ud83d\ude00', truncated: false },
    timings: { totalMs: 5, upstreamFirstByteMs: null, upstreamMs: null, stagesUs: { 'id\u0000': 3 } },
  });
  const plain = record('text-plain', { nodeId: NODE.nodeId, receivedAt: at, finishedAt: at + 5 });
  const batch = batchOf([odd, plain]);
  t.match(await deliver(batch), { acceptedCount: 2, duplicateCount: 0 });
  t.match(await deliver(batch), { acceptedCount: 0, duplicateCount: 2 }, 'a resend is recognised by the stored ids');
  const { rows } = await pool.query<{ request_id: string; model: string; record: RequestRecord }>(
    "select request_id, model, record from request_records where request_id like 'text-%' order by request_id",
  );
  t.equal(rows.length, 2);
  t.equal(rows[0]!.request_id, 'text-odd-\ufffd-id');
  t.equal(rows[0]!.model, 'gpt\ufffdx');
  t.equal(rows[0]!.record.bodies?.response, 'a\ufffdb \ufffd ok \ud83d\ude00', 'a paired surrogate (an emoji) is kept');
  t.equal(rows[0]!.record.bodies?.request, '{"model":"gpt\\u0000x"}', 'an escaped NUL inside JSON text is only text and is kept');
  t.same(rows[0]!.record.timings.stagesUs, { 'id\ufffd': 3 }, 'keys too');
  t.same(rows[1]!.record, plain, 'the other record of the batch is stored untouched');
});
