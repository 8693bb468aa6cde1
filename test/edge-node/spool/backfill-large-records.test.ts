// Draining a backlog of large records (bodies kept, hundreds of KiB each) reads each record once:
// a batch is chosen from the records' sizes and only its rows are read. Reading the next 500 whole
// rows to send the two or three that fit in 1 MiB read the backlog over and over (quadratic in its
// length) and blocked the event loop for seconds per batch. Every read through better-sqlite3 is
// counted here, whichever statement makes it.
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import type { NodeMessage, RecordBatch } from '../../../proto/src/index.js';
import { BackfillChannel, DEFAULT_BATCH_BYTES } from '../../../edge-node/src/spool/backfill-channel.js';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { NODE_ID, quietLogger, record, tempStateDir } from './spool-helpers.js';

const RECORDS = 40;
const BODY_CHARS = 300 * 1024;

/** Bytes of the strings and buffers in what a statement returned. */
function bytesOf(value: unknown): number {
  if (Buffer.isBuffer(value)) return value.length;
  if (typeof value === 'string') return Buffer.byteLength(value);
  if (Array.isArray(value)) return value.reduce((sum: number, v) => sum + bytesOf(v), 0);
  if (value !== null && typeof value === 'object') return Object.values(value).reduce((sum: number, v) => sum + bytesOf(v), 0);
  return 0;
}

/** Counts the bytes every better-sqlite3 statement returns (all, get, iterate) until teardown. */
function countReads(t: { teardown(fn: () => unknown): void }): { bytes: number } {
  const counter = { bytes: 0 };
  const db = new Database(':memory:');
  const proto = Object.getPrototypeOf(db.prepare('select 1')) as Record<'all' | 'get' | 'iterate', (...args: unknown[]) => unknown>;
  db.close();
  const { all, get, iterate } = proto;
  proto.all = function (this: unknown, ...args: unknown[]) {
    const rows = all.apply(this, args);
    counter.bytes += bytesOf(rows);
    return rows;
  };
  proto.get = function (this: unknown, ...args: unknown[]) {
    const row = get.apply(this, args);
    counter.bytes += bytesOf(row);
    return row;
  };
  proto.iterate = function* (this: unknown, ...args: unknown[]) {
    for (const row of iterate.apply(this, args) as Iterable<unknown>) {
      counter.bytes += bytesOf(row);
      yield row;
    }
  };
  t.teardown(() => Object.assign(proto, { all, get, iterate }));
  return counter;
}

t.test('a backlog of large records is read once: each batch reads only the rows it sends, all delivered once, in order', async (t) => {
  const file = path.join(tempStateDir(t), 'spool.db');
  const store = new SpoolStore({ file, meta: createSpoolFile(file, NODE_ID), logger: quietLogger(), limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }) });
  t.teardown(() => store.close());
  const body = 'x'.repeat(BODY_CHARS);
  const ids = Array.from({ length: RECORDS }, (_, i) => `big-${String(i).padStart(3, '0')}`);
  for (let i = 0; i < RECORDS; i += 10) {
    await Promise.all(ids.slice(i, i + 10).map((id) => store.finalise(record(id, { bodies: { request: body, response: 'ok', truncated: false } }))));
  }
  const rowBytes = Buffer.byteLength(JSON.stringify(record(ids[0]!, { bodies: { request: body, response: 'ok', truncated: false } })));

  const reads = countReads(t);
  const channel = new BackfillChannel({ store, logger: quietLogger() });
  t.teardown(() => channel.stop());
  const batches: Array<{ batch: RecordBatch; readBefore: number }> = [];
  let readAtLastSend = 0;
  channel.onEstablished((m: NodeMessage) => {
    const batch = m.recordBatch;
    if (batch === undefined) return true;
    batches.push({ batch, readBefore: reads.bytes - readAtLastSend });
    readAtLastSend = reads.bytes;
    // The control plane acknowledges at once.
    setImmediate(() => channel.onMessage({ recordBatchAck: { batchId: batch.batchId, lastSequence: batch.lastSequence, acceptedCount: batch.records.length, duplicateCount: 0, rejectedCount: 0 } }));
    return true;
  });
  await waitFor(() => store.backlogCount() === 0, { what: 'the backlog delivered and deleted', timeoutMs: 60_000 });

  const sentIds = batches.flatMap(({ batch }) => batch.records.map((r) => r.requestId));
  t.same(sentIds, ids, 'every record once, oldest first');
  const sentBytes = batches.reduce((sum, { batch }) => sum + batch.records.reduce((s, r) => s + r.recordJson.length, 0), 0);
  t.equal(sentBytes, rowBytes * RECORDS, 'the records as stored');
  const perBatch = Math.floor(DEFAULT_BATCH_BYTES / rowBytes);
  t.same(batches.map(({ batch }) => batch.records.length), [...Array<number>(Math.floor(RECORDS / perBatch)).fill(perBatch), RECORDS % perBatch].filter((n) => n > 0), 'batches filled up to the byte budget');
  const worst = Math.max(...batches.map((b) => b.readBefore));
  t.ok(worst <= DEFAULT_BATCH_BYTES + rowBytes, `at most a batch and a row read per batch sent (worst: ${worst} bytes, budget ${DEFAULT_BATCH_BYTES + rowBytes})`);
  t.ok(reads.bytes <= sentBytes + rowBytes, `the backlog read about once in all (${reads.bytes} bytes read, ${sentBytes} sent)`);
});
