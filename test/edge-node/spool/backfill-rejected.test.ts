// One spool row the control plane cannot ingest (here a byte changed inside its JSON, which
// quick_check does not see) no longer stops the backlog: the control plane sets it aside and acks
// the batch with a rejected count, the node deletes the batch, logs a warning with the count and
// counts it, and the rest of the backlog drains on the same session.
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { MAX_RECORD_JSON_BYTES } from '../../../proto/src/index.js';
import type { ControlMessage, RecordBatch } from '../../../proto/src/index.js';
import { parseRecordBatch } from '../../../control-plane/src/records/record-batch-handler.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { BackfillChannel } from '../../../edge-node/src/spool/backfill-channel.js';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { NODE_ID, quietLogger, record, tempStateDir } from './spool-helpers.js';

const limits = () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' as const });

/** A spool file holding `count` final records (`<prefix>-<i>`), then damaged by `damage` with the node stopped. */
async function damagedSpool(t: Parameters<typeof tempStateDir>[0], prefix: string, count: number, damage: (db: Database.Database) => void) {
  const file = path.join(tempStateDir(t), 'spool.db');
  const meta = createSpoolFile(file, NODE_ID);
  const first = new SpoolStore({ file, meta, logger: quietLogger(), limits });
  await Promise.all(Array.from({ length: count }, (_, i) => first.finalise(record(`${prefix}-${i}`))));
  await first.close();
  const db = new Database(file);
  damage(db);
  db.close();
  return { file, meta };
}

/**
 * Backfills the spool in `file` to a stand-in of the control plane's batch handler (its real
 * parseRecordBatch, acked as the control plane acks) until the backlog is empty; each batch sent
 * is shown to `sent`. Returns the reasons rows were set aside for, and the channel.
 */
async function drainThroughIngest(t: Parameters<typeof tempStateDir>[0], spool: { file: string; meta: ReturnType<typeof createSpoolFile> }, sent: (batch: RecordBatch) => void) {
  const store = new SpoolStore({ file: spool.file, meta: spool.meta, logger: quietLogger(), limits });
  t.teardown(() => store.close());
  const channel = new BackfillChannel({ store, logger: quietLogger(), maxRecords: 10 });
  t.teardown(() => channel.stop());
  const reasons: string[] = [];
  channel.onEstablished((message) => {
    if (message.recordBatch === undefined) return true;
    sent(message.recordBatch);
    const parsed = parseRecordBatch(message, NODE_ID);
    reasons.push(...parsed.rejected.map((r) => r.reason));
    const ack: ControlMessage = {
      recordBatchAck: { batchId: parsed.batchId, lastSequence: parsed.lastSequence, acceptedCount: parsed.records.length, duplicateCount: 0, rejectedCount: parsed.rejected.length },
    };
    setImmediate(() => channel.onMessage(ack));
    return true;
  });
  await waitFor(() => (store.backlogCount() === 0 ? true : undefined), { what: 'the backlog to drain' });
  return { reasons, channel };
}

t.test('a damaged row is acknowledged as rejected, counted and logged, and the backlog drains behind it', async (t) => {
  const { file, meta } = await damagedSpool(t, 'poison', 50, (db) => {
    db.prepare(`update records set record_json = replace(record_json, '"costMicros":900', '"costMicros":-00') where sequence = 1`).run();
  });

  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger({ level: 'info', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) } });
  const store = new SpoolStore({ file, meta, logger: quietLogger(), limits });
  t.teardown(() => store.close());
  const channel = new BackfillChannel({ store, logger, maxRecords: 10 });
  t.teardown(() => channel.stop());

  // The control plane's batch parsing, and the ack it sends (accepted counts stand in for the database).
  let refused: string | undefined;
  channel.onEstablished((message) => {
    if (message.recordBatch === undefined) return true;
    try {
      const parsed = parseRecordBatch(message, NODE_ID);
      const ack: ControlMessage = {
        recordBatchAck: { batchId: parsed.batchId, lastSequence: parsed.lastSequence, acceptedCount: parsed.records.length, duplicateCount: 0, rejectedCount: parsed.rejected.length },
      };
      setImmediate(() => channel.onMessage(ack));
    } catch (err) {
      refused = (err as Error).message;
    }
    return true;
  });
  await waitFor(() => (store.backlogCount() === 0 ? true : undefined), { what: 'the backlog to drain' });
  t.equal(refused, undefined, 'no batch was refused');
  t.equal(channel.totals.rejected, 1, 'the rejected record is counted');
  t.equal(channel.totals.recordsAcknowledged, 50);
  const warnings = lines.filter((l) => l.level === 40);
  t.equal(warnings.length, 1, 'one warning');
  t.match(warnings[0], { rejected: 1, firstSequence: 1, lastSequence: 10 });
  t.notOk(JSON.stringify(lines).includes('costMicros'), 'no record content in the log');
});

t.test('a row whose bytes are not UTF-8 is sent as stored and set aside as not_utf8, never repaired into a record that passes', async (t) => {
  const file = path.join(tempStateDir(t), 'spool.db');
  const meta = createSpoolFile(file, NODE_ID);
  const first = new SpoolStore({ file, meta, logger: quietLogger(), limits });
  await Promise.all(['bad-bytes', 'good'].map((id) => first.finalise(record(id))));
  await first.close();
  // A damaged sector inside a string of the record: its JSON still parses once decoded with
  // replacement characters, which is how reading it as text used to repair it silently.
  const db = new Database(file);
  const stored = db.prepare(`select cast(record_json as blob) as bytes from records where request_id = 'bad-bytes'`).get() as { bytes: Buffer };
  const at = stored.bytes.indexOf('"model":"echo"') + '"model":"'.length;
  t.ok(at > '"model":"'.length, 'the record names its model');
  const damaged = Buffer.from(stored.bytes);
  damaged[at] = 0xff;
  db.prepare(`update records set record_json = cast(? as text) where request_id = 'bad-bytes'`).run(damaged);
  db.close();

  const store = new SpoolStore({ file, meta, logger: quietLogger(), limits });
  t.teardown(() => store.close());
  const channel = new BackfillChannel({ store, logger: quietLogger(), maxRecords: 10 });
  t.teardown(() => channel.stop());
  const seen: Array<{ accepted: string[]; rejected: Array<{ requestId: string; reason: string; bytes: Buffer }> }> = [];
  channel.onEstablished((message) => {
    if (message.recordBatch === undefined) return true;
    const parsed = parseRecordBatch(message, NODE_ID);
    seen.push({ accepted: parsed.records.map((r) => r.requestId), rejected: parsed.rejected });
    const ack: ControlMessage = {
      recordBatchAck: { batchId: parsed.batchId, lastSequence: parsed.lastSequence, acceptedCount: parsed.records.length, duplicateCount: 0, rejectedCount: parsed.rejected.length },
    };
    setImmediate(() => channel.onMessage(ack));
    return true;
  });
  await waitFor(() => (store.backlogCount() === 0 ? true : undefined), { what: 'the backlog to drain' });
  t.same(seen.flatMap((b) => b.accepted), ['good']);
  const rejected = seen.flatMap((b) => b.rejected);
  t.same(rejected.map((r) => [r.requestId, r.reason]), [['bad-bytes', 'not_utf8']]);
  t.ok(rejected[0]!.bytes.equals(damaged), 'the control plane keeps the bytes as they were stored');
});

t.test('a row longer than the control plane accepts in one message goes cut, is set aside as too_large, and the backlog drains behind it', async (t) => {
  // Only a damaged or edited file holds such a row: the node's builder cuts records to 1 MiB.
  const spool = await damagedSpool(t, 'huge', 5, (db) => {
    db.prepare('update records set record_json = ? where sequence = 2').run(`{"x":"${'x'.repeat(5 * 1024 * 1024)}"}`);
  });
  const largestMessage: number[] = [];
  const { reasons, channel } = await drainThroughIngest(t, spool, (batch) => largestMessage.push(batch.records.reduce((sum, r) => sum + r.recordJson.length, 0)));
  t.same(reasons, ['too_large'], 'the long row is set aside as too large');
  t.equal(channel.totals.recordsAcknowledged, 5);
  t.ok(Math.max(...largestMessage) <= MAX_RECORD_JSON_BYTES + 1, `no batch carried more than one record's limit of JSON (largest ${Math.max(...largestMessage)} bytes)`);
});

t.test('a row whose request id is longer than any valid one goes with the id cut, is set aside, and the backlog drains behind it', async (t) => {
  // A 4 MiB id sent whole made every batch holding it larger than the control plane's gRPC limit
  // (4 MiB): each session ended, and nothing behind the row was ever delivered.
  const spool = await damagedSpool(t, 'long-id', 5, (db) => {
    db.prepare('update records set request_id = ? where sequence = 2').run('x'.repeat(4 * 1024 * 1024));
  });
  const longestId: number[] = [];
  const { reasons, channel } = await drainThroughIngest(t, spool, (batch) => longestId.push(Math.max(...batch.records.map((r) => r.requestId.length))));
  t.equal(reasons.length, 1, `the row is set aside (${reasons.join(', ')})`);
  t.equal(channel.totals.recordsAcknowledged, 5);
  t.equal(Math.max(...longestId), 129, 'the id went cut to one character over the limit');
});
