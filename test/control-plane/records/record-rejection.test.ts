// A record the control plane cannot ingest no longer ends the node's session: over a real gateway
// session, a batch with one non-JSON record and one valid record has its valid record ingested and
// settled, the bad one kept in rejected_request_records, and the ack counts it as rejected; the
// session stays up. A resend of the batch stores the rejected record once.
import t from 'tap';
import type { RecordBatch, RequestRecord } from '../../../proto/src/index.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { record as spoolRecord } from '../../edge-node/spool/spool-helpers.js';
import { insertAccount } from '../billing/billing-fixtures.js';
import { enrolledNode, gatewayIdentity, gatewaySettings, liveSession, migratedPool, startTestGateway } from '../gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const gateway = await startTestGateway(t, { pool, settings, identity });

/** A record received a minute ago: the gateway ingests records received within its window around now. */
const record = (requestId: string, extra: Partial<RequestRecord> = {}): RequestRecord =>
  spoolRecord(requestId, { receivedAt: Date.now() - 60_000, finishedAt: Date.now() - 59_950, ...extra });

const entry = (r: RequestRecord): { requestId: string; recordJson: Buffer } => ({ requestId: r.requestId, recordJson: Buffer.from(JSON.stringify(r)) });

t.test('one non-JSON record is set aside; the valid one is ingested and settled; the session stays up', async (t) => {
  const node = await enrolledNode(pool, settings);
  const account = await insertAccount(pool);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const good = record('rej-good-1', { nodeId: node.id, accountId: account, cost: { reservedMicros: 1500, costMicros: 900, leaseId: null, priced: true } });
  const secret = 'sk-should-never-be-logged';
  const batch: RecordBatch = {
    batchId: 'rej-batch-1',
    records: [{ requestId: 'rej-bad-1', recordJson: Buffer.from(`{"requestId":"rej-bad-1","note":"${secret}"`) }, entry(good)],
    firstSequence: 1n,
    lastSequence: 2n,
  };
  conn.send({ recordBatch: batch });
  const ack = (await conn.next('RecordBatchAck')).recordBatchAck;
  t.match(ack, { batchId: 'rej-batch-1', lastSequence: 2n, acceptedCount: 1, duplicateCount: 0, rejectedCount: 1 });

  const ingested = await pool.query('select request_id, node_id from request_records where request_id = $1', [good.requestId]);
  t.same(ingested.rows, [{ request_id: good.requestId, node_id: node.id }], 'the valid record is ingested');
  const ledger = await pool.query<{ n: number }>('select count(*)::int as n from billing_ledger where request_id = $1', [good.requestId]);
  t.equal(ledger.rows[0]?.n, 1, 'and settled: one ledger entry for it');

  const rejected = await pool.query('select node_id, node_name, request_id, reason, record_text, record_bytes, record_size, batch_id from rejected_request_records where node_id = $1', [node.id]);
  t.same(rejected.rows, [{
    node_id: node.id, node_name: node.name, request_id: 'rej-bad-1', reason: 'not_json',
    record_text: batch.records[0]!.recordJson.toString('utf8'), record_bytes: null, record_size: batch.records[0]!.recordJson.length, batch_id: 'rej-batch-1',
  }], 'the bad record is kept as sent, with why');
  t.equal((await pool.query('select 1 from request_records where request_id = $1', ['rej-bad-1'])).rowCount, 0, 'and not ingested');

  const line = gateway.log.lines().find((l) => typeof l.msg === 'string' && l.msg.startsWith('record batch held records that cannot be ingested'));
  t.match(line, { level: 50, nodeId: node.id, batchId: 'rej-batch-1', rejected: 1, newlyStored: 1, reasons: { not_json: 1 } }, 'one error line for the batch');
  t.notOk(gateway.log.lines().some((l) => JSON.stringify(l).includes(secret)), 'no record content in the logs');

  // A resend of the same batch (a lost ack): nothing stored twice.
  conn.send({ recordBatch: { ...batch, batchId: 'rej-batch-1b' } });
  t.match((await conn.next('second RecordBatchAck')).recordBatchAck, { batchId: 'rej-batch-1b', acceptedCount: 0, duplicateCount: 1, rejectedCount: 1 });
  const count = await pool.query<{ n: number }>('select count(*)::int as n from rejected_request_records where node_id = $1', [node.id]);
  t.equal(count.rows[0]?.n, 1, 'the rejected record is stored once');

  // The session is still up: a later batch is ingested on it.
  const later = record('rej-later-1', { nodeId: node.id });
  conn.send({ recordBatch: { batchId: 'rej-batch-2', records: [entry(later)], firstSequence: 3n, lastSequence: 3n } });
  t.match((await conn.next('third RecordBatchAck')).recordBatchAck, { batchId: 'rej-batch-2', acceptedCount: 1, rejectedCount: 0 });
  t.notOk(conn.received.some((m) => m.refusal !== undefined), 'no refusal was sent');
});

t.test('every kind of bad record is set aside with its reason; bytes that are not UTF-8 are kept as bytea', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const notUtf8 = Buffer.from([0x7b, 0xff, 0xfe, 0x00, 0x7d]);
  const records = [
    { requestId: 'kind-not-utf8', recordJson: notUtf8 },
    entry({ ...record('kind-invalid', { nodeId: node.id }), status: 'great' as never }),
    { requestId: 'kind-mismatch', recordJson: Buffer.from(JSON.stringify(record('kind-other-id', { nodeId: node.id }))) },
    entry(record('kind-foreign', { nodeId: 'someone-else' })),
    { requestId: 'x'.repeat(200), recordJson: Buffer.from('{}') },
    entry(record('kind-ok', { nodeId: node.id })),
  ];
  conn.send({ recordBatch: { batchId: 'kinds-1', records, firstSequence: 1n, lastSequence: 6n } });
  t.match((await conn.next('RecordBatchAck')).recordBatchAck, { acceptedCount: 1, rejectedCount: 5 });
  const { rows } = await pool.query<{ request_id: string; reason: string; record_bytes: Buffer | null; record_text: string | null }>(
    'select request_id, reason, record_bytes, record_text from rejected_request_records where node_id = $1 order by id', [node.id],
  );
  t.same(rows.map((r) => [r.request_id, r.reason]), [
    ['kind-not-utf8', 'not_utf8'],
    ['kind-invalid', 'invalid_record'],
    ['kind-mismatch', 'request_id_mismatch'],
    ['kind-foreign', 'foreign_node'],
    ['x'.repeat(128), 'invalid_request_id'],
  ]);
  t.same(rows[0]?.record_bytes, notUtf8, 'bytes that are not UTF-8 are stored as they came');
  t.equal(rows[0]?.record_text, null);
  t.equal((await pool.query("select 1 from request_records where request_id like 'kind-%'")).rowCount, 1, 'only the valid record is ingested');
});

t.test('a malformed batch still ends the session with MESSAGE_INVALID', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  conn.send({ recordBatch: { batchId: 'bad-seq', records: [entry(record('seq-1', { nodeId: node.id }))], firstSequence: 5n, lastSequence: 4n } });
  const refusal = (await conn.next('refusal')).refusal;
  t.match(refusal?.error, { code: 'MESSAGE_INVALID', message: /lastSequence is before firstSequence/ });
});
