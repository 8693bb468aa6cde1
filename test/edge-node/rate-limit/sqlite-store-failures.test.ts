// The shared SQLite limit store when its file cannot be written for a while (another writer holds
// the lock; the same path as a full disk: the write throws): a call waits briefly, never seconds; a
// release or token true-up that failed is made later (by the next admit, or a retry timer when no
// admit comes), so a concurrency slot never leaks for the replica's lifetime. Real files, a real
// second connection holding the write lock.
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { RATE_LIMIT_FILE, SqliteLimitStore } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { ManualClock, callContext, finish, quietLogger } from './limit-fixtures.js';

type Tap = Test;

function replica(tt: Tap, dir: string, clock: ManualClock): { limiter: NodeRateLimiter; store: SqliteLimitStore } {
  const store = new SqliteLimitStore({ location: dir, clock, heartbeatTimer: false });
  const limiter = new NodeRateLimiter(store, quietLogger);
  tt.teardown(() => limiter.close());
  return { limiter, store };
}

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

function timed(fn: () => void): number {
  const started = performance.now();
  fn();
  return performance.now() - started;
}

t.test('a release that finds the file locked gives up after a short wait, and the next admit frees the slot', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const { limiter, store } = replica(t, dir, clock);
  const keyLimits = { concurrentRequests: 1 };
  const first = callContext(clock, { keyLimits });
  t.equal(limiter.admit(first), undefined);
  const lock = holdWriteLock(dir);
  const ms = timed(() => finish(first));
  t.ok(ms < 1_000, `the release blocked for ${Math.round(ms)} ms, not seconds`);
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
  const a = replica(t, dir, clock);
  const b = replica(t, dir, clock);
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
  const { limiter, store } = replica(t, dir, clock);
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
  const { limiter } = replica(t, dir, clock);
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
  const { limiter } = replica(t, dir, clock);
  const keyLimits = { requestsPerMinute: 1_000, concurrentRequests: 100 };
  const lock = holdWriteLock(dir);
  const ms = timed(() => {
    for (let i = 0; i < 20; i++) t.equal(limiter.admit(callContext(clock, { keyLimits })), undefined, 'admitted without limits while the file is stuck');
  });
  lock.free();
  t.ok(ms < 1_000, `20 admits took ${Math.round(ms)} ms in all`);
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
