// The spool store: group commit, durability of open rows and finalise, interrupted rows, quota and
// both full policies, and a real SQLITE_FULL (max_page_count) that blocks and then recovers.
import { statSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import { isZenovaError } from '../../../edge-node/src/errors.js';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import type { SpoolLimits, SpoolStoreOptions } from '../../../edge-node/src/spool/spool-store.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { NODE_ID, openRow, quietLogger, record, tempStateDir } from './spool-helpers.js';

function newStore(t: Test, opts: Partial<SpoolStoreOptions> & { limits?: () => SpoolLimits } = {}): { store: SpoolStore; file: string } {
  const file = opts.file ?? path.join(tempStateDir(t), 'spool.db');
  const meta = opts.meta ?? createSpoolFile(file, NODE_ID);
  const store = new SpoolStore({ file, meta, logger: quietLogger(), limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }), ...opts });
  t.teardown(() => store.close());
  return { store, file };
}

function storedRecords(file: string): Array<{ sequence: number; request_id: string; record_json: string }> {
  const db = new Database(file, { readonly: true });
  try {
    return db.prepare('select sequence, request_id, record_json from records order by sequence').all() as Array<{ sequence: number; request_id: string; record_json: string }>;
  } finally {
    db.close();
  }
}

function openRows(file: string): string[] {
  const db = new Database(file, { readonly: true });
  try {
    return db.prepare('select request_id from open_requests').pluck().all() as string[];
  } finally {
    db.close();
  }
}

/** The next commit that needs another page fails with a real SQLITE_FULL (max_page_count is per connection: the writing one). */
function capAtCurrentSize(store: SpoolStore): void {
  const pages = (store.writerPragma('page_count') as Array<{ page_count: number }>)[0]!.page_count;
  store.writerPragma(`max_page_count = ${pages}`);
}

function expectSpoolFull(t: Test, fn: () => void): void {
  try {
    fn();
    t.fail('expected ZN_ERR_SPOOL_FULL');
  } catch (err) {
    t.ok(isZenovaError(err) && err.code === 'ZN_ERR_SPOOL_FULL', `threw ZN_ERR_SPOOL_FULL (${(err as Error).message})`);
  }
}

t.test('finalises issued in the same tick share one transaction and are readable by another connection once resolved', async (t) => {
  const { store, file } = newStore(t);
  const before = store.commitCount();
  const ids = Array.from({ length: 200 }, (_, i) => `req-${i}`);
  for (const id of ids) void store.open(openRow(id));
  await Promise.all(ids.map((id) => store.finalise(record(id))));
  t.equal(store.commitCount() - before, 1, 'one group commit for 200 opens and 200 finals');
  const rows = storedRecords(file);
  t.same(rows.map((r) => r.request_id), ids, 'sequence order is finalise order');
  t.same(openRows(file), [], 'finalising removed the open rows');
  t.equal(store.backlogCount(), 200);
});

t.test('a request opened in one commit and finalised in a later one leaves no open row behind', async (t) => {
  const { store, file } = newStore(t);
  void store.open(openRow('long'));
  // A finalise of another request forces a commit that holds only the open row of `long`.
  await store.finalise(record('short'));
  t.same(openRows(file), ['long'], 'the long request is durable as an open row while it runs');
  await store.finalise(record('long'));
  t.same(openRows(file), [], 'its final record replaced the open row');
  t.same(storedRecords(file).map((r) => r.request_id), ['short', 'long']);
});

t.test('more queued writes than the batch limit are committed at once, in order', async (t) => {
  const { store, file } = newStore(t, { maxQueued: 10 });
  const written = Promise.all(Array.from({ length: 25 }, (_, i) => store.finalise(record(`r-${String(i).padStart(2, '0')}`))));
  t.equal(store.commitCount(), 2, 'two commits of 10 before the next tick');
  await written;
  t.equal(store.commitCount(), 3, 'the last 5 on the next tick');
  t.equal(store.backlogCount(), 25);
  t.same(storedRecords(file).map((r) => r.request_id), Array.from({ length: 25 }, (_, i) => `r-${String(i).padStart(2, '0')}`), 'in finalise order');
});

t.test('open rows left by a crash become interrupted records that keep the reservation when the spool is reopened', async (t) => {
  const dir = tempStateDir(t);
  const file = path.join(dir, 'spool.db');
  const meta = createSpoolFile(file, NODE_ID);
  const first = new SpoolStore({ file, meta, logger: quietLogger(), limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }) });
  void first.open(openRow('finished'));
  void first.open(openRow('cut-off', { reservedMicros: 7777, api: 'messages', stream: true, configVersion: 9, clientRequestId: 'trace-7', priced: true }));
  void first.open(openRow('free', { reservedMicros: 0, leaseId: null, priced: false }));
  // A row as an older release wrote it, without `priced`: a reservation says the model had a price.
  void first.open(openRow('older-release', { reservedMicros: 5 }));
  await first.finalise(record('finished'));
  await first.close();
  t.same(openRows(file).sort(), ['cut-off', 'free', 'older-release'], 'the unfinished requests are still open rows');

  const second = new SpoolStore({ file, meta, logger: quietLogger(), limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }) });
  t.teardown(() => second.close());
  t.same(openRows(file), []);
  const rows = storedRecords(file);
  t.same(rows.map((r) => r.request_id).sort(), ['cut-off', 'finished', 'free', 'older-release']);
  const recordOf = (id: string): Record<string, unknown> => JSON.parse(rows.find((r) => r.request_id === id)!.record_json) as Record<string, unknown>;
  const interrupted = recordOf('cut-off');
  t.match(interrupted, {
    requestId: 'cut-off',
    nodeId: NODE_ID,
    status: 'interrupted',
    httpStatus: 0,
    errorCode: null,
    api: 'messages',
    stream: true,
    configVersion: 9,
    clientRequestId: 'trace-7',
    usage: { inputTokens: 0, outputTokens: 0 },
    cost: { reservedMicros: 7777, costMicros: 0, leaseId: 'lease-1', priced: true },
  });
  t.match(recordOf('free'), { status: 'interrupted', cost: { reservedMicros: 0, leaseId: null, priced: false } });
  t.match(recordOf('older-release'), { status: 'interrupted', cost: { reservedMicros: 5, priced: true } });
  t.equal(second.backlogCount(), 4);
});

t.test('with policy reject a full spool refuses new requests but still finalises the ones it accepted', async (t) => {
  const limits: SpoolLimits = { quotaBytes: 1024 ** 3, fullPolicy: 'reject' };
  const { store } = newStore(t, { limits: () => limits });
  void store.open(openRow('accepted-before'));
  await new Promise((resolve) => setImmediate(resolve));
  limits.quotaBytes = store.bytes() + 64 * 1024;
  const big = 'x'.repeat(16 * 1024);
  let n = 0;
  while (!store.isFull()) {
    await store.finalise(record(`fill-${n}`, { bodies: { request: big, response: big, truncated: false } }));
    n += 1;
    if (n > 1000) throw new Error('the spool never filled');
  }
  t.ok(n > 0, `filled after ${n} records`);
  expectSpoolFull(t, () => void store.open(openRow('refused')));
  t.equal(store.keepsBodies(), true, 'reject keeps bodies for the requests it accepts');
  await store.finalise(record('accepted-before'));
  t.equal(store.backlogCount(), n + 1, 'the request accepted before the spool filled was recorded');
});

t.test('with policy metering-only a full spool keeps accepting requests and stops keeping bodies', async (t) => {
  const limits: SpoolLimits = { quotaBytes: 1024 ** 3, fullPolicy: 'metering-only' };
  const { store } = newStore(t, { limits: () => limits });
  await store.finalise(record('first'));
  t.equal(store.keepsBodies(), true);
  limits.quotaBytes = 1;
  await store.finalise(record('second'));
  t.equal(store.keepsBodies(), false, 'bodies are dropped while full');
  void store.open(openRow('still-accepted'));
  await store.finalise(record('still-accepted', { bodies: null }));
  t.equal(store.backlogCount(), 3, 'metering records are still written');
});

t.test('a real SQLITE_FULL holds finalises pending, refuses new requests, and commits them when space returns', async (t) => {
  const { store, file } = newStore(t, { retryMs: 20 });
  await store.finalise(record('before'));
  capAtCurrentSize(store);
  const big = 'y'.repeat(200 * 1024);
  let resolved = false;
  const pending = store.finalise(record('during', { bodies: { request: big, response: null, truncated: false } })).then(() => (resolved = true));
  await waitFor(() => store.pending().writeFailing, { what: 'the commit to fail with SQLITE_FULL' });
  expectSpoolFull(t, () => void store.open(openRow('refused-while-full')));
  t.equal(resolved, false, 'the finalise is not reported durable');
  t.same(storedRecords(file).map((r) => r.request_id), ['before']);

  store.writerPragma('max_page_count = 1073741823');
  await pending;
  t.equal(store.pending().writeFailing, false, 'writes recovered');
  t.same(storedRecords(file).map((r) => r.request_id), ['before', 'during']);
  void store.open(openRow('accepted-again'));
});

t.test('open() resolves once the open row is in the file, one promise for the rows of one group commit', async (t) => {
  const { store, file } = newStore(t);
  const first = store.open(openRow('open-a'));
  const second = store.open(openRow('open-b'));
  t.equal(first, second, 'rows of one commit share its promise');
  t.same(openRows(file), [], 'queued, not yet written');
  await first;
  t.same(openRows(file).sort(), ['open-a', 'open-b'], 'durable by the time it resolves');
  const third = store.open(openRow('open-c'));
  t.not(third, first, 'the next commit has its own');
  await third;
  t.same(openRows(file).sort(), ['open-a', 'open-b', 'open-c']);
});

t.test('when the open rows cannot be written (a real SQLITE_FULL) their promise rejects with ZN_ERR_SPOOL_FULL and the rows are dropped, while finalises wait for space', async (t) => {
  const { store, file } = newStore(t, { retryMs: 20 });
  await store.finalise(record('before'));
  capAtCurrentSize(store);
  const big = 'z'.repeat(200 * 1024);
  const opened = store.open(openRow('open-while-filling'));
  let finalised = false;
  const pending = store.finalise(record('final-while-filling', { bodies: { request: big, response: null, truncated: false } })).then(() => (finalised = true));
  const err = await opened.then(() => undefined, (e: unknown) => e);
  t.ok(isZenovaError(err) && err.code === 'ZN_ERR_SPOOL_FULL', 'the open rows are refused with ZN_ERR_SPOOL_FULL');
  t.equal(finalised, false, 'the final record is not reported durable');
  t.equal(store.pending().opens, 0, 'the refused open rows are no longer queued');

  store.writerPragma('max_page_count = 1073741823');
  await pending;
  t.same(openRows(file), [], 'the refused request never got an open row');
  t.same(storedRecords(file).map((r) => r.request_id), ['before', 'final-while-filling']);
});

t.test('acknowledged ranges are deleted with the next commit and the backlog shrinks', async (t) => {
  const { store, file } = newStore(t);
  await Promise.all(['a', 'b', 'c', 'd'].map((id) => store.finalise(record(id))));
  const rows = storedRecords(file);
  store.deleteAcknowledged(rows[0]!.sequence, rows[1]!.sequence);
  await waitFor(() => store.backlogCount() === 2, { what: 'the delete to commit' });
  t.same(storedRecords(file).map((r) => r.request_id), ['c', 'd']);
});

t.test('commits never checkpoint: the writing connection has autocheckpoint off and a worker thread copies the WAL into the file', async (t) => {
  const { store, file } = newStore(t);
  t.same(store.writerPragma('wal_autocheckpoint'), [{ wal_autocheckpoint: 0 }], 'no checkpoint inside a commit');
  const body = 'z'.repeat(4000);
  for (let i = 0; i < 300; i++) await store.finalise(record(`wal-${i}`, { bodies: { request: body, response: null, truncated: false } }));
  // Over 1 MB of records was committed; only a checkpoint moves it from the WAL into the database file.
  await waitFor(() => statSync(file).size > 1_000_000, { what: 'the checkpoint worker to copy the WAL into the database file', timeoutMs: 10_000 });
  t.equal(store.backlogCount(), 300);
});
