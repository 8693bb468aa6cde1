// One enrolled node made a request_records partition for every distinct month of a batch (with the
// month after), never dropped: 1,000 records over 1970-9999 made 1,084, under the partition lock
// every replica's ingestion waits on, and slowed every query on the table. Over a real gateway
// session, a record received more than a day ahead of the control plane's clock or more than 400
// days behind it is set aside as received_at_out_of_range (kept, not charged, acked) and gets no
// partition; the records inside the window are ingested and charged as usual.
import t from 'tap';
import type { ControlMessage, RecordBatch, RecordBatchAck, RequestRecord } from '../../../proto/src/index.js';
import { ingestRecords, receivedAtWindow, RECEIVED_AT_MAX_AGE_MS } from '../../../control-plane/src/records/record-ingestion.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { record } from '../../edge-node/spool/spool-helpers.js';
import { insertAccount, insertNode } from '../billing/billing-fixtures.js';
import { enrolledNode, gatewayIdentity, gatewaySettings, liveSession, migratedPool, startTestGateway } from '../gateway-harness.js';
import type { NodeConnection } from '../gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const gateway = await startTestGateway(t, { pool, settings, identity });

const DAY = 86_400_000;
const entry = (r: RequestRecord): { requestId: string; recordJson: Buffer } => ({ requestId: r.requestId, recordJson: Buffer.from(JSON.stringify(r)) });

async function batchAck(conn: NodeConnection, batchId: string): Promise<RecordBatchAck> {
  for (;;) {
    const message: ControlMessage = await conn.next(`RecordBatchAck of ${batchId}`);
    if (message.recordBatchAck?.batchId === batchId) return message.recordBatchAck;
  }
}

async function partitionCount(): Promise<number> {
  const { rows } = await pool.query<{ n: number }>("select count(*)::int as n from pg_inherits where inhparent = 'request_records'::regclass");
  return rows[0]!.n;
}

t.test('a batch of records over a thousand months makes no partition outside the window; those records are set aside, acked and not charged', async (t) => {
  const node = await enrolledNode(pool, settings);
  const account = await insertAccount(pool);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const charged = { reservedMicros: 0, costMicros: 900, leaseId: null, priced: true };
  const at = (requestId: string, receivedAt: number): RequestRecord => record(requestId, { nodeId: node.id, accountId: account, receivedAt, finishedAt: receivedAt, cost: charged });

  const now = Date.now();
  // Inside the window, its edges near: each is ingested.
  const inside = [at('window-now', now - 60_000), at('window-ahead', now + DAY - 3_600_000), at('window-old', now - 399 * DAY)];
  // Just outside, and then one a month from 1970 to year 9962.
  const outside = [at('window-too-far-ahead', now + DAY + 3_600_000), at('window-too-old', now - 401 * DAY)];
  for (let i = 0; outside.length + inside.length < 1000; i++) {
    const ms = Date.UTC(1970 + i * 8, i % 12, 15);
    if (ms < now - 500 * DAY || ms > now + 30 * DAY) outside.push(at(`month-${i}`, ms));
  }
  const before = await partitionCount();
  const batch: RecordBatch = { batchId: 'months-1', records: [...outside, ...inside].map(entry), firstSequence: 1n, lastSequence: 1000n };
  conn.send({ recordBatch: batch });
  t.match(await batchAck(conn, 'months-1'), { lastSequence: 1000n, acceptedCount: 3, duplicateCount: 0, rejectedCount: 997 }, 'acked: the node deletes the batch');
  // The months of the three records inside and the month after each: at most six.
  t.ok((await partitionCount()) - before <= 6, `no partition for the records outside the window (${(await partitionCount()) - before} made)`);

  const ids = [...outside, ...inside].map((r) => r.requestId);
  const ingested = await pool.query<{ request_id: string }>('select request_id from request_records where request_id = any($1) order by request_id', [ids]);
  t.same(ingested.rows.map((r) => r.request_id), ['window-ahead', 'window-now', 'window-old'], 'the records inside the window are ingested');
  const ledger = await pool.query<{ request_id: string }>('select request_id from billing_ledger where request_id = any($1) order by request_id', [ids]);
  t.same(ledger.rows.map((r) => r.request_id), ['window-ahead', 'window-now', 'window-old'], 'and only they are charged');

  const { rows: kept } = await pool.query<{ request_id: string; reason: string; detail: string; record_text: string }>(
    'select request_id, reason, detail, record_text from rejected_request_records where node_id = $1 order by request_id', [node.id],
  );
  t.equal(kept.length, 997, 'the others are kept for the operator');
  t.ok(kept.every((r) => r.reason === 'received_at_out_of_range'), 'as received_at_out_of_range');
  const ahead = kept.find((r) => r.request_id === 'window-too-far-ahead');
  t.match(ahead, { detail: /ahead of the control plane's clock/, record_text: JSON.stringify(outside[0]) }, 'as sent, saying why');
  t.match(kept.find((r) => r.request_id === 'window-too-old')?.detail, /400 days behind/);

  // A resend (a lost ack): nothing stored, charged or set aside twice.
  conn.send({ recordBatch: { ...batch, batchId: 'months-2' } });
  t.match(await batchAck(conn, 'months-2'), { acceptedCount: 0, duplicateCount: 3, rejectedCount: 997 });
  const again = await pool.query<{ n: number }>('select count(*)::int as n from rejected_request_records where node_id = $1', [node.id]);
  t.equal(again.rows[0]?.n, 997, 'set aside once');
  t.equal((await pool.query('select 1 from billing_ledger where request_id = any($1)', [ids])).rowCount, 3, 'charged once');

  const line = gateway.log.lines().find((l) => typeof l.msg === 'string' && l.msg.startsWith('record batch held records that cannot be ingested'));
  t.match(line, { nodeId: node.id, batchId: 'months-1', reasons: { received_at_out_of_range: 997 } }, 'one error line names the node and the reason');
});

t.test('a record ingested before and resent once its time left the window is a duplicate, not set aside; one with other content is a conflict', async (t) => {
  const node = { nodeId: await insertNode(pool), nodeName: 'edge-late' };
  const now = Date.now();
  const first = record('late-resend', { nodeId: node.nodeId, receivedAt: now - 300 * DAY, finishedAt: now - 300 * DAY + 50 });
  t.match(await ingestRecords(pool, node, [first], undefined, undefined, receivedAtWindow(now)), { accepted: 1 });
  // 200 days on, the record is 500 days old: outside the window, but this node's record holds its id.
  const later = receivedAtWindow(now + 200 * DAY);
  t.ok(first.receivedAt < later.fromMs, 'the record is outside the later window');
  t.match(await ingestRecords(pool, node, [first], { batchId: 'late-1', rejected: [] }, undefined, later), { accepted: 0, duplicates: 1, rejected: 0 }, 'a duplicate');
  const changed = { ...first, cost: { ...first.cost, costMicros: 5_000 } };
  t.match(await ingestRecords(pool, node, [changed], { batchId: 'late-2', rejected: [] }, undefined, later), { accepted: 0, duplicates: 0, rejected: 1 }, 'a conflict');
  const never = record('late-never-seen', { nodeId: node.nodeId, receivedAt: first.receivedAt, finishedAt: first.finishedAt });
  t.match(await ingestRecords(pool, node, [never], { batchId: 'late-3', rejected: [] }, undefined, later), { accepted: 0, rejected: 1 }, 'a record never ingested is set aside');
  const { rows } = await pool.query<{ request_id: string; reason: string }>('select request_id, reason from rejected_request_records where node_id = $1 order by request_id', [node.nodeId]);
  t.same(rows, [{ request_id: 'late-never-seen', reason: 'received_at_out_of_range' }, { request_id: 'late-resend', reason: 'request_id_conflict' }]);
  t.equal(RECEIVED_AT_MAX_AGE_MS, 400 * DAY, 'the bound docs/spool.md names');
});

t.test('a record received outside the window whose request id another node\'s record holds is set aside as request_id_taken, not received_at_out_of_range', async (t) => {
  const holder = { nodeId: await insertNode(pool), nodeName: 'edge-holder' };
  const other = { nodeId: await insertNode(pool), nodeName: 'edge-other' };
  const now = Date.now();
  const window = receivedAtWindow(now);
  const held = record('taken-far-off', { nodeId: holder.nodeId, receivedAt: now - 60_000, finishedAt: now - 59_000 });
  t.match(await ingestRecords(pool, holder, [held], undefined, undefined, window), { accepted: 1 });

  // Another node's record with the same request id, received a year and a half behind the clock
  // and (in a second batch) two days ahead of it: both outside the window.
  const behind = record('taken-far-off', { nodeId: other.nodeId, receivedAt: now - 550 * DAY, finishedAt: now - 550 * DAY + 50 });
  const ahead = { ...behind, receivedAt: now + 2 * DAY, finishedAt: now + 2 * DAY + 50 };
  for (const [i, r] of [behind, ahead].entries()) {
    t.ok(r.receivedAt < window.fromMs || r.receivedAt > window.toMs, 'outside the window');
    const result = await ingestRecords(pool, other, [r], { batchId: `taken-far-off-${i}`, rejected: [] }, undefined, window);
    t.match(result, { accepted: 0, duplicates: 0, rejected: 1 }, 'set aside, not a duplicate');
    t.match(result.setAside, [{ requestId: 'taken-far-off', reason: 'request_id_taken', detail: `the request id is held by a record of node ${holder.nodeId}` }]);
  }
  const { rows } = await pool.query<{ reason: string }>('select reason from rejected_request_records where node_id = $1', [other.nodeId]);
  t.same(rows.map((r) => r.reason), ['request_id_taken', 'request_id_taken'], 'stored with the reason operators filter by');
  const kept = await pool.query<{ node_id: string }>('select node_id from request_records where request_id = $1', ['taken-far-off']);
  t.same(kept.rows, [{ node_id: holder.nodeId }], 'the record holding the id stays as it is');
});
