// The shared SQLite limit store when its file cannot be written for a while (another writer holds
// the lock; the same path as a full disk: the write throws): a call waits briefly, never seconds; a
// release or token true-up that failed is made later (by the next admit, or a retry timer when no
// admit comes), so a concurrency slot never leaks for the replica's lifetime. Real files, a real
// second connection holding the write lock.
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import { createNodePipelineMetrics } from '../../../edge-node/src/metrics/node-pipeline-metrics.js';
import { RATE_LIMIT_FILE } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { parsePrometheusText, sampleValue } from '../metrics/prometheus-text.js';
import { ManualClock, callContext, finish, sqliteReplica } from './limit-fixtures.js';

type Tap = Test;

/** Another process's writer stuck inside a transaction: holds the file's write lock until `free`. */
function holdWriteLock(dir: string): { free(): void } {
  const other = new Database(path.join(dir, RATE_LIMIT_FILE));
  other.exec('BEGIN IMMEDIATE');
  return {
    free() {
      other.exec('COMMIT');
      other.close();
    },
  };
}

// Another replica's ordinary short transactions, on their own thread so one can end while this
// thread is blocked in a write. state[0]: a request counter, bumped by this thread to ask for a
// transaction; state[1]: how many the writer has begun (it then holds the lock HOLD_MS, and commits).
const BRIEF_WRITER = `
const { workerData } = require('node:worker_threads');
const Database = require('better-sqlite3');
const state = new Int32Array(workerData.state);
const db = new Database(workerData.file);
for (let done = 0; ; done++) {
  Atomics.wait(state, 0, done);
  db.exec('BEGIN IMMEDIATE');
  Atomics.store(state, 1, done + 1);
  Atomics.notify(state, 1);
  Atomics.wait(state, 2, 0, workerData.holdMs);
  db.exec('COMMIT');
}
`;
const HOLD_MS = 8;

/** Another replica's writer; `whileHeld(fn)` runs `fn` right after it has taken the lock for HOLD_MS. */
async function briefWriter(tt: Tap, dir: string): Promise<{ whileHeld<T>(fn: () => T): T }> {
  const state = new Int32Array(new SharedArrayBuffer(12));
  const worker = new Worker(BRIEF_WRITER, { eval: true, workerData: { file: path.join(dir, RATE_LIMIT_FILE), state: state.buffer, holdMs: HOLD_MS } });
  let failed: Error | undefined;
  worker.on('error', (err: Error) => (failed = err));
  tt.teardown(() => worker.terminate());
  await new Promise<void>((resolve) => worker.once('online', () => resolve()));
  return {
    whileHeld(fn) {
      const asked = Atomics.add(state, 0, 1) + 1;
      Atomics.notify(state, 0);
      // This thread may block: the writer answers within milliseconds (a failure seen before this call is thrown).
      const deadline = performance.now() + 10_000;
      while (Atomics.load(state, 1) < asked) {
        if (failed !== undefined) throw failed;
        if (performance.now() > deadline) throw new Error('the other writer never took the lock');
        Atomics.wait(state, 1, asked - 1, 50);
      }
      return fn();
    },
  };
}

function timed(fn: () => void): number {
  const started = performance.now();
  fn();
  return performance.now() - started;
}

t.test('a release that finds the file locked gives up after a short wait, and the next admit frees the slot', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const { limiter, store } = sqliteReplica(t, dir, clock);
  const keyLimits = { concurrentRequests: 1 };
  const first = callContext(clock, { keyLimits });
  t.equal(limiter.admit(first), undefined);
  const lock = holdWriteLock(dir);
  const ms = timed(() => finish(first));
  // The store waits 250 ms for the lock; the bound is loose for a loaded CI host, and still half of SQLite's default 5 s.
  t.ok(ms < 2_500, `the release blocked for ${Math.round(ms)} ms, not seconds`);
  t.ok(store.hasPendingWrites(), 'the failed release is remembered');
  lock.free();
  t.equal(limiter.admit(callContext(clock, { keyLimits })), undefined, 'the slot of the finished request is free');
  t.notOk(store.hasPendingWrites());
  t.equal(limiter.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'and the new request holds it');
  clock.advance(600_000);
  t.equal(limiter.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'a live slot is never freed by the retry');
});

t.test('another replica sees a slot whose release failed freed soon after the lock is gone, with no admit on the first', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const a = sqliteReplica(t, dir, clock);
  const b = sqliteReplica(t, dir, clock);
  const keyLimits = { concurrentRequests: 1 };
  const onA = callContext(clock, { keyLimits });
  t.equal(a.limiter.admit(onA), undefined);
  const lock = holdWriteLock(dir);
  finish(onA);
  lock.free();
  t.equal(b.limiter.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'not freed yet');
  await waitFor(() => !a.store.hasPendingWrites(), { what: "A's retry timer to free the slot" });
  t.equal(b.limiter.admit(callContext(clock, { keyLimits })), undefined, 'B is admitted');
});

t.test('a token true-up that finds the file locked is written by the next admit, before it counts', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const { limiter, store } = sqliteReplica(t, dir, clock);
  const keyLimits = { tokensPerMinute: 100 };
  const first = callContext(clock, { keyLimits, estimatedInputTokens: 60, maxOutputTokens: 20 });
  t.equal(limiter.admit(first), undefined);
  const lock = holdWriteLock(dir);
  finish(first, { inputTokens: 5, outputTokens: 5 });
  t.ok(store.hasPendingWrites());
  lock.free();
  const second = callContext(clock, { keyLimits, estimatedInputTokens: 60, maxOutputTokens: 20 });
  t.equal(limiter.admit(second), undefined, '80 estimated but 10 used: another 80 fits');
  t.equal(second.responseHeaders['x-ratelimit-remaining-tokens'], '10');
});

t.test('usage whose true-up is written only in a later minute still counts in full', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const { limiter } = sqliteReplica(t, dir, clock);
  const keyLimits = { tokensPerMinute: 1_000 };
  const stream = callContext(clock, { keyLimits, estimatedInputTokens: 10, maxOutputTokens: 10 });
  t.equal(limiter.admit(stream), undefined);
  const lock = holdWriteLock(dir);
  finish(stream, { inputTokens: 10, outputTokens: 890 });
  lock.free();
  clock.advance(90_000);
  const next = callContext(clock, { keyLimits, estimatedInputTokens: 1, maxOutputTokens: 1 });
  t.equal(limiter.admit(next), undefined);
  // The correction (900 used − 20 estimated) counts whole in the minute it was written; the
  // estimate still decays with the admission minute (half of it 30 s into the next minute).
  t.equal(next.responseHeaders['x-ratelimit-remaining-tokens'], String(1_000 - 880 - 10 - 2));
});

t.test('one stuck writer costs one short wait, not a wait per call', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const { limiter } = sqliteReplica(t, dir, clock);
  const keyLimits = { requestsPerMinute: 1_000, concurrentRequests: 100 };
  const lock = holdWriteLock(dir);
  const ms = timed(() => {
    for (let i = 0; i < 20; i++) t.equal(limiter.admit(callContext(clock, { keyLimits })), undefined, 'admitted without limits while the file is stuck');
  });
  lock.free();
  // One 250 ms wait then short ones (about 0.5 s); a 250 ms wait per call would be 5 s. Loose for a loaded CI host.
  t.ok(ms < 2_500, `20 admits took ${Math.round(ms)} ms in all`);
  await waitFor(
    () => {
      const ctx = callContext(clock, { keyLimits });
      limiter.admit(ctx);
      finish(ctx);
      return ctx.responseHeaders['x-ratelimit-limit-requests'] === '1000';
    },
    { what: 'the store to count again once the lock is free' },
  );
});

t.test('an admit that meets another replica\'s short transaction waits for it and counts', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const { limiter } = sqliteReplica(t, dir, clock);
  const keyLimits = { requestsPerMinute: 1 };
  t.equal(limiter.admit(callContext(clock, { keyLimits })), undefined);
  const other = await briefWriter(t, dir);
  const refusal = other.whileHeld(() => limiter.admit(callContext(clock, { keyLimits })));
  t.equal(refusal?.error.code, 'ZN_ERR_RATE_LIMITED', 'the limit holds');
});

t.test('right after a long wait, an admit still rides out a short transaction instead of failing open, and only failures are counted', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const { limiter, store } = sqliteReplica(t, dir, clock);
  const metrics = createNodePipelineMetrics(() => ({ spoolBytes: 0, backfillBacklog: 0 }));
  const keyLimits = { requestsPerMinute: 2, tokensPerMinute: 1_000 };
  const other = await briefWriter(t, dir);
  const first = callContext(clock, { keyLimits, estimatedInputTokens: 10, maxOutputTokens: 10 });
  t.equal(limiter.admit(first), undefined);
  metrics.requestFinished(first);

  const stuck = holdWriteLock(dir);
  const failedOpen = callContext(clock, { keyLimits });
  t.equal(limiter.admit(failedOpen), undefined, 'the file stays locked for the whole wait: admitted without limits');
  stuck.free();
  metrics.requestFinished(failedOpen);
  t.equal(sampleValue(parsePrometheusText(metrics.render()), 'zenova_node_rate_limit_store_failures_total'), 1, 'the request let through is counted');

  finish(first, { inputTokens: 5, outputTokens: 5 });
  t.ok(store.hasPendingWrites(), 'the true-up is left for the next admit while the lock was hot lately');

  const second = callContext(clock, { keyLimits, maxOutputTokens: 20 });
  t.equal(other.whileHeld(() => limiter.admit(second)), undefined, 'counted: 1 of 2 requests used');
  t.notOk(store.hasPendingWrites(), 'and the admit wrote the true-up');
  t.equal(second.responseHeaders['x-ratelimit-remaining-requests'], '0');
  t.equal(second.responseHeaders['x-ratelimit-remaining-tokens'], String(1_000 - 10 - 20));
  metrics.requestFinished(second);

  const third = callContext(clock, { keyLimits, maxOutputTokens: 20 });
  t.equal(other.whileHeld(() => limiter.admit(third))?.error.code, 'ZN_ERR_RATE_LIMITED', 'the limit holds');
  metrics.requestFinished(third);
  t.equal(sampleValue(parsePrometheusText(metrics.render()), 'zenova_node_rate_limit_store_failures_total'), 1, 'admits that counted are not store failures');
});
