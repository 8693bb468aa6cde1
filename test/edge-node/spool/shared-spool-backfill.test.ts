// Replicas of a node share spool.db and only the one holding the control link backfills: records
// another replica commits are found by the holder (SQLite data_version) and sent without waiting
// for a commit of its own; every replica's backlog figure follows the shared file.
import path from 'node:path';
import t from 'tap';
import type { NodeMessage, RecordBatch } from '../../../proto/src/index.js';
import { BackfillChannel } from '../../../edge-node/src/spool/backfill-channel.js';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { runEach } from '../../fixtures/teardown-steps.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { NODE_ID, quietLogger, record, tempStateDir } from './spool-helpers.js';

t.test("the link holder backfills another replica's records", async (t) => {
  const file = path.join(tempStateDir(t), 'spool.db');
  const meta = createSpoolFile(file, NODE_ID);
  const limits = () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' as const });
  const holder = new SpoolStore({ file, meta, logger: quietLogger(), limits });
  const follower = new SpoolStore({ file, meta, logger: quietLogger(), limits });
  t.teardown(() => runEach('the two spool stores', () => holder.close(), () => follower.close()));
  const channel = new BackfillChannel({ store: holder, logger: quietLogger(), lingerMs: 10 });
  t.teardown(() => channel.stop());
  const sent: RecordBatch[] = [];
  channel.onEstablished((m: NodeMessage) => {
    if (m.recordBatch !== undefined) sent.push(m.recordBatch);
    return true;
  });
  // As open-node-spool does at open: the starting point of data_version.
  holder.noticeOtherWriters();
  follower.noticeOtherWriters();
  await follower.finalise(record('r-from-follower-1'));
  await follower.finalise(record('r-from-follower-2'));
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.equal(sent.length, 0, 'nothing wakes the holder by itself');
  t.equal(holder.noticeOtherWriters(), true, 'the other connection committed');
  await waitFor(() => sent.length === 1, { what: 'a batch with the follower records' });
  t.same(sent[0]!.records.map((r) => r.requestId), ['r-from-follower-1', 'r-from-follower-2']);
  t.equal(holder.backlogCount(), 2);
  channel.onMessage({ recordBatchAck: { batchId: sent[0]!.batchId, lastSequence: sent[0]!.lastSequence, acceptedCount: 2, duplicateCount: 0, rejectedCount: 0 } });
  await waitFor(() => holder.backlogCount() === 0, { what: 'the acked rows deleted' });
  t.equal(holder.noticeOtherWriters(), false, "the holder's own deletes are not another writer's");
  t.equal(follower.backlogCount(), 2, "the follower's figure is stale until it looks");
  t.equal(follower.noticeOtherWriters(), true);
  t.equal(follower.backlogCount(), 0, "and true once it does: the holder's delete is seen");
});
