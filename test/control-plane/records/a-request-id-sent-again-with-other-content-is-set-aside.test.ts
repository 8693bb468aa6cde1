// Two records of one node with one request id but other content (another cost, say): within a batch
// the last copy was ingested and charged, across batches the first, the later one acked as a
// duplicate with an info line and never compared. Over a real gateway session the first copy is
// kept and charged in both cases; a later copy with other content is set aside as
// request_id_conflict (kept as sent, named in the batch's error line, acked), while an identical
// copy, keys in another order included, is a duplicate as before.
import t from 'tap';
import type { ControlMessage, RecordBatchAck, RequestRecord } from '../../../proto/src/index.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { record } from '../../edge-node/spool/spool-helpers.js';
import { insertAccount } from '../billing/billing-fixtures.js';
import { enrolledNode, gatewayIdentity, gatewaySettings, liveSession, migratedPool, startTestGateway } from '../gateway-harness.js';
import type { HasTeardown, NodeConnection } from '../gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const gateway = await startTestGateway(t, { pool, settings, identity });

const entry = (r: RequestRecord, json = JSON.stringify(r)): { requestId: string; recordJson: Buffer } => ({ requestId: r.requestId, recordJson: Buffer.from(json) });

async function batchAck(conn: NodeConnection, batchId: string): Promise<RecordBatchAck> {
  for (;;) {
    const message: ControlMessage = await conn.next(`RecordBatchAck of ${batchId}`);
    if (message.recordBatchAck?.batchId === batchId) return message.recordBatchAck;
  }
}

/** The same object with its keys in reverse order: the same record, other bytes. */
function reversedKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reversedKeys);
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).reverse().map(([k, v]) => [k, reversedKeys(v)]));
  return value;
}

async function setUp(t: HasTeardown): Promise<{ conn: NodeConnection; nodeId: string; copy: (id: string, costMicros: number) => RequestRecord }> {
  const node = await enrolledNode(pool, settings);
  const account = await insertAccount(pool);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const at = Date.now() - 60_000;
  const copy = (id: string, costMicros: number): RequestRecord => record(id, {
    nodeId: node.id, accountId: account, receivedAt: at, finishedAt: at + 50,
    cost: { reservedMicros: 0, costMicros, leaseId: null, priced: true },
  });
  return { conn, nodeId: node.id, copy };
}

async function storedCost(requestId: string): Promise<{ stored: string[]; charged: string[] }> {
  const stored = await pool.query<{ c: string }>('select cost_micros::text as c from request_records where request_id = $1', [requestId]);
  const charged = await pool.query<{ a: string }>("select amount_micros::text as a from billing_ledger where request_id = $1 and kind = 'debit'", [requestId]);
  return { stored: stored.rows.map((r) => r.c), charged: charged.rows.map((r) => r.a) };
}

async function keptAside(nodeId: string): Promise<Array<{ request_id: string; reason: string; detail: string; record_text: string }>> {
  const { rows } = await pool.query<{ request_id: string; reason: string; detail: string; record_text: string }>(
    'select request_id, reason, detail, record_text from rejected_request_records where node_id = $1 order by id', [nodeId],
  );
  return rows;
}

t.test('within one batch the first copy of a request id is ingested and charged; a later copy with other content is set aside as a conflict', async (t) => {
  const { conn, nodeId, copy } = await setUp(t);
  const first = copy('twin-batch', 100);
  const other = copy('twin-batch', 900);
  conn.send({ recordBatch: { batchId: 'twin-1', records: [entry(first), entry(other)], firstSequence: 1n, lastSequence: 2n } });
  t.match(await batchAck(conn, 'twin-1'), { acceptedCount: 1, duplicateCount: 0, rejectedCount: 1 }, 'acked, the later copy counted as rejected');
  t.same(await storedCost('twin-batch'), { stored: ['100'], charged: ['100'] }, 'the first copy is stored and charged');
  const kept = await keptAside(nodeId);
  t.same(kept.map((r) => [r.request_id, r.reason]), [['twin-batch', 'request_id_conflict']]);
  t.equal((JSON.parse(kept[0]!.record_text) as RequestRecord).cost.costMicros, 900, 'the later copy is kept for the operator');
  t.match(kept[0]!.detail, /same batch/);

  const line = gateway.log.lines().find((l) => l.batchId === 'twin-1' && typeof l.msg === 'string' && l.msg.startsWith('record batch held records that cannot be ingested'));
  t.match(line, { nodeId, reasons: { request_id_conflict: 1 }, requestIds: ['twin-batch'] }, 'the error line names the node, the request id and the reason');
  t.notOk(gateway.log.lines().some((l) => JSON.stringify(l).includes('"bodies"')), 'and no record content');

  // The same record again in one batch, its keys in another order: a duplicate, not a conflict.
  const same = copy('twin-same', 300);
  conn.send({ recordBatch: { batchId: 'twin-2', records: [entry(same), entry(same, JSON.stringify(reversedKeys(same)))], firstSequence: 3n, lastSequence: 4n } });
  t.match(await batchAck(conn, 'twin-2'), { acceptedCount: 1, duplicateCount: 1, rejectedCount: 0 });
  t.same(await storedCost('twin-same'), { stored: ['300'], charged: ['300'] });
});

t.test('a later batch with other content under a request id already ingested is set aside as a conflict, not acked as a duplicate; an identical resend is a duplicate', async (t) => {
  const { conn, nodeId, copy } = await setUp(t);
  const first = copy('twin-later', 100);
  conn.send({ recordBatch: { batchId: 'later-1', records: [entry(first)], firstSequence: 1n, lastSequence: 1n } });
  t.match(await batchAck(conn, 'later-1'), { acceptedCount: 1 });

  const other = copy('twin-later', 5_000);
  conn.send({ recordBatch: { batchId: 'later-2', records: [entry(other)], firstSequence: 2n, lastSequence: 2n } });
  t.match(await batchAck(conn, 'later-2'), { acceptedCount: 0, duplicateCount: 0, rejectedCount: 1 }, 'rejected, not a duplicate');
  t.same(await storedCost('twin-later'), { stored: ['100'], charged: ['100'] }, 'the first stays, charged once');
  const kept = await keptAside(nodeId);
  t.same(kept.map((r) => [r.request_id, r.reason]), [['twin-later', 'request_id_conflict']]);
  t.equal(kept[0]!.record_text, JSON.stringify(other), 'kept as sent');
  t.match(kept[0]!.detail, /ingested earlier with other content/);

  conn.send({ recordBatch: { batchId: 'later-3', records: [entry(other)], firstSequence: 2n, lastSequence: 2n } });
  t.match(await batchAck(conn, 'later-3'), { acceptedCount: 0, duplicateCount: 0, rejectedCount: 1 }, 'its resend too');
  t.equal((await keptAside(nodeId)).length, 1, 'kept once');

  conn.send({ recordBatch: { batchId: 'later-4', records: [entry(first, JSON.stringify(reversedKeys(first)))], firstSequence: 3n, lastSequence: 3n } });
  t.match(await batchAck(conn, 'later-4'), { acceptedCount: 0, duplicateCount: 1, rejectedCount: 0 }, 'the first copy resent, keys in another order, is a duplicate');
  t.same(await storedCost('twin-later'), { stored: ['100'], charged: ['100'] });
});
