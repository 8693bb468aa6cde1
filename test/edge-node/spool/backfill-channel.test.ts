// Backfill over a control session: ordered bounded batches, a window of unacked batches, deletion
// only on ack, and a resend of everything unacknowledged after the session is lost.
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import type { NodeMessage, RecordBatch } from '../../../proto/src/index.js';
import { BackfillChannel } from '../../../edge-node/src/spool/backfill-channel.js';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { NODE_ID, quietLogger, record, tempStateDir } from './spool-helpers.js';

async function setup(t: Test, records: number, opts: { maxRecords?: number; window?: number; maxBytes?: number; lingerMs?: number } = {}) {
  const file = path.join(tempStateDir(t), 'spool.db');
  const store = new SpoolStore({ file, meta: createSpoolFile(file, NODE_ID), logger: quietLogger(), limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }) });
  t.teardown(() => store.close());
  await Promise.all(Array.from({ length: records }, (_, i) => store.finalise(record(`r-${String(i).padStart(4, '0')}`))));
  const channel = new BackfillChannel({ store, logger: quietLogger(), maxRecords: 10, window: 2, ...opts });
  t.teardown(() => channel.stop());
  const sent: RecordBatch[] = [];
  let live = true;
  const send = (m: NodeMessage): boolean => {
    if (!live) return false;
    if (m.recordBatch !== undefined) sent.push(m.recordBatch);
    return true;
  };
  const ack = (batch: RecordBatch, duplicates = 0): boolean =>
    channel.onMessage({ recordBatchAck: { batchId: batch.batchId, lastSequence: batch.lastSequence, acceptedCount: batch.records.length - duplicates, duplicateCount: duplicates, rejectedCount: 0 } });
  return { store, channel, sent, send, ack, endSession: () => { live = false; channel.onEnded(); }, newSession: () => { live = true; } };
}

const ids = (batch: RecordBatch): string[] => batch.records.map((r) => r.requestId);

t.test('batches go out oldest first, bounded in size, with no more unacknowledged than the window', async (t) => {
  const { channel, sent, send, store } = await setup(t, 35);
  channel.onEstablished(send);
  await waitFor(() => sent.length === 2, { what: 'two batches' });
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.equal(sent.length, 2, 'the window of 2 is full: nothing more is sent');
  t.same(ids(sent[0]!), Array.from({ length: 10 }, (_, i) => `r-${String(i).padStart(4, '0')}`));
  t.equal(sent[1]!.firstSequence, sent[0]!.lastSequence + 1n, 'consecutive sequences');
  const json = JSON.parse(sent[0]!.records[0]!.recordJson.toString('utf8')) as { requestId: string };
  t.equal(json.requestId, 'r-0000', 'record_json is the record');
  t.equal(store.backlogCount(), 35, 'nothing deleted before an ack');
});

t.test('a byte limit cuts batches but a single record always goes', async (t) => {
  const { channel, sent, send } = await setup(t, 3, { maxBytes: 10, window: 3 });
  channel.onEstablished(send);
  await waitFor(() => sent.length === 3, { what: 'three single-record batches' });
  t.same(sent.map((b) => b.records.length), [1, 1, 1]);
});

t.test('an ack deletes exactly the rows of its batch and lets the next batch go', async (t) => {
  const { channel, sent, send, ack, store } = await setup(t, 35);
  channel.onEstablished(send);
  await waitFor(() => sent.length === 2, { what: 'two batches' });
  t.ok(ack(sent[0]!), 'the channel takes RecordBatchAck');
  await waitFor(() => store.backlogCount() === 25 && sent.length === 3, { what: 'the first batch deleted and a third sent' });
  const remaining = store.backlogAfter(0, 100).map((r) => r.requestId);
  t.equal(remaining[0], 'r-0010', 'only the acked rows are gone');
  t.notOk(channel.onMessage({ leaseGrant: { accountId: 'a', amountMicros: 1n, leaseId: 'l', expiresAt: 0n } }), 'other messages are not taken');
});

t.test('an ack for a batch not in flight deletes nothing', async (t) => {
  const { channel, sent, send, store } = await setup(t, 5);
  channel.onEstablished(send);
  await waitFor(() => sent.length === 1, { what: 'a batch' });
  channel.onMessage({ recordBatchAck: { batchId: 'unknown', lastSequence: 1000n, acceptedCount: 5, duplicateCount: 0, rejectedCount: 0 } });
  channel.onMessage({ recordBatchAck: { batchId: sent[0]!.batchId, lastSequence: 999n, acceptedCount: 5, duplicateCount: 0, rejectedCount: 0 } });
  await new Promise((resolve) => setTimeout(resolve, 30));
  t.equal(store.backlogCount(), 5);
});

t.test('an ack that accounts for fewer records than its batch deletes nothing, and the batch goes again in the next session', async (t) => {
  const { channel, sent, send, ack, store, endSession, newSession } = await setup(t, 10);
  channel.onEstablished(send);
  await waitFor(() => sent.length === 1, { what: 'a batch' });
  const batch = sent[0]!;
  channel.onMessage({ recordBatchAck: { batchId: batch.batchId, lastSequence: batch.lastSequence, acceptedCount: 3, duplicateCount: 0, rejectedCount: 0 } });
  t.equal(store.backlogCount(), 10, 'an ack for 3 of 10 records deleted none');
  endSession();
  newSession();
  channel.onEstablished(send);
  await waitFor(() => sent.length === 2, { what: 'the batch sent again' });
  ack(sent[1]!);
  await waitFor(() => store.backlogCount() === 0 || undefined, { what: 'a whole ack to delete it' });
});

t.test('after the session is lost every unacknowledged batch is resent on the next session', async (t) => {
  const { channel, sent, send, ack, store, endSession, newSession } = await setup(t, 30);
  channel.onEstablished(send);
  await waitFor(() => sent.length === 2, { what: 'two batches' });
  ack(sent[0]!);
  await waitFor(() => sent.length === 3, { what: 'a third batch' });
  endSession();
  const before = sent.length;
  newSession();
  channel.onEstablished(send);
  await waitFor(() => sent.length === before + 2, { what: 'resent batches' });
  t.same(ids(sent[before]!), ids(sent[1]!), 'the unacked second batch is resent first');
  ack(sent[before]!);
  ack(sent[before + 1]!);
  await waitFor(() => store.backlogCount() === 0, { what: 'the backlog to drain' });
  t.equal(channel.totals.recordsAcknowledged, 30);
});

t.test('records finalised while the session is up are shipped without waiting for a reconnect', async (t) => {
  const { channel, sent, send, ack, store } = await setup(t, 0);
  channel.onEstablished(send);
  await store.finalise(record('late-1'));
  await waitFor(() => sent.length === 1, { what: 'the new record shipped' });
  ack(sent[0]!);
  await waitFor(() => store.backlogCount() === 0, { what: 'deleted' });
});

t.test('records trickling in while the session is up travel together after the linger, not one batch each', async (t) => {
  const { channel, sent, send, store } = await setup(t, 0, { lingerMs: 150 });
  channel.onEstablished(send);
  for (let i = 0; i < 5; i++) {
    await store.finalise(record(`trickle-${i}`));
    await new Promise((resolve) => setImmediate(resolve));
  }
  t.equal(sent.length, 0, 'nothing sent before the linger passed');
  await waitFor(() => sent.length === 1, { what: 'one batch after the linger' });
  t.same(ids(sent[0]!), ['trickle-0', 'trickle-1', 'trickle-2', 'trickle-3', 'trickle-4']);
});

t.test('a full batch goes at once, without waiting for the linger', async (t) => {
  const { channel, sent, send, store } = await setup(t, 0, { lingerMs: 60_000 });
  channel.onEstablished(send);
  await Promise.all(Array.from({ length: 10 }, (_, i) => store.finalise(record(`full-${i}`))));
  await waitFor(() => sent.length === 1, { what: 'the full batch' });
  t.equal(sent[0]!.records.length, 10);
});

t.test('the tail left behind full batches goes after the linger, with no further commits', async (t) => {
  const { channel, sent, send, store } = await setup(t, 0, { lingerMs: 50, window: 4 });
  channel.onEstablished(send);
  // One commit of 13 records (e.g. the queue written at once after a disk-full spell): a full
  // batch goes at once, and the 3 left must not wait for a commit that may never come.
  await Promise.all(Array.from({ length: 13 }, (_, i) => store.finalise(record(`burst-${String(i).padStart(2, '0')}`))));
  t.equal(store.commitCount(), 1, 'the 13 records came in one commit');
  await waitFor(() => sent.length === 2, { what: 'the tail after the linger' });
  t.equal(sent[0]!.records.length, 10);
  t.same(ids(sent[1]!), ['burst-10', 'burst-11', 'burst-12']);
});
