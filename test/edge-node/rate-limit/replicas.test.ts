// Several node replicas on one state dir share one set of limits through the SQLite file: a limit
// holds node-wide, exactly under contention from real processes, and a dead replica's concurrency
// slots expire with its lease.
import { statSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { DEFAULT_OWNER_LEASE_MS, RATE_LIMIT_FILE, SqliteLimitStore } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { parseJsonLines, startProcess, tsEntry } from '../../fixtures/processes.js';
import { ManualClock, T0, callContext, finish, quietLogger, sqliteReplica } from './limit-fixtures.js';

t.test('two replicas on one file share a key limit of 10 per minute: 6 on A and 4 on B, then the 11th is refused on either', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const a = sqliteReplica(t, dir, clock).limiter;
  const b = sqliteReplica(t, dir, clock).limiter;
  const keyLimits = { requestsPerMinute: 10 };
  for (let i = 0; i < 6; i++) t.equal(a.admit(callContext(clock, { keyLimits })), undefined, `A ${i + 1}`);
  for (let i = 0; i < 4; i++) t.equal(b.admit(callContext(clock, { keyLimits })), undefined, `B ${i + 1}`);
  t.equal(a.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_RATE_LIMITED');
  t.equal(b.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_RATE_LIMITED');
  t.equal(statSync(path.join(dir, 'rate-limits.sqlite')).mode & 0o777, 0o600, 'the shared file is owner-only');
});

t.test('replicas share concurrency slots and token true-ups', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const a = sqliteReplica(t, dir, clock).limiter;
  const b = sqliteReplica(t, dir, clock).limiter;
  const keyLimits = { concurrentRequests: 1, tokensPerMinute: 100 };
  const onA = callContext(clock, { keyLimits, estimatedInputTokens: 60, maxOutputTokens: 20 });
  t.equal(a.admit(onA), undefined);
  t.equal(b.admit(callContext(clock, { keyLimits, estimatedInputTokens: 1, maxOutputTokens: 1 }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED');
  finish(onA, { inputTokens: 10, outputTokens: 0 });
  const onB = callContext(clock, { keyLimits, estimatedInputTokens: 60, maxOutputTokens: 20 });
  t.equal(b.admit(onB), undefined, "B sees A's slot freed and its tokens trued up to 10");
  t.equal(onB.responseHeaders['x-ratelimit-remaining-tokens'], '10');
});

t.test("a dead replica's slots stop counting once its lease runs out, and not before", async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const live = sqliteReplica(t, dir, clock).limiter;
  const dying = new SqliteLimitStore({ location: dir, clock, heartbeatTimer: false });
  const dyingLimiter = new NodeRateLimiter(dying, quietLogger);
  const keyLimits = { concurrentRequests: 2 };
  t.equal(dyingLimiter.admit(callContext(clock, { keyLimits })), undefined);
  t.equal(dyingLimiter.admit(callContext(clock, { keyLimits })), undefined);
  dying.abandon(); // as kill -9: slots and lease stay in the file
  clock.advance(DEFAULT_OWNER_LEASE_MS - 1);
  t.equal(live.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'still within the lease');
  clock.advance(1);
  t.equal(live.admit(callContext(clock, { keyLimits })), undefined, 'lease over: one slot free');
  t.equal(live.admit(callContext(clock, { keyLimits })), undefined, 'both slots free');
  t.equal(live.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'the live ones count');
});

t.test("a dead replica's slots and lease leave the file at a live replica's heartbeat once the lease ran out, though no limit is reached", async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const live = sqliteReplica(t, dir, clock).store;
  const dying = new SqliteLimitStore({ location: dir, clock, heartbeatTimer: false });
  const dyingLimiter = new NodeRateLimiter(dying, quietLogger);
  t.equal(dyingLimiter.admit(callContext(clock, { keyLimits: { concurrentRequests: 100 } })), undefined);
  dying.abandon(); // as kill -9
  const rows = (): { slots: number; leases: number } => {
    const db = new Database(path.join(dir, RATE_LIMIT_FILE), { readonly: true });
    try {
      const count = (table: string): number => (db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
      return { slots: count('slots'), leases: count('leases') };
    } finally {
      db.close();
    }
  };
  t.same(rows(), { slots: 1, leases: 2 }, 'the dead replica\'s slot and both leases');
  clock.advance(DEFAULT_OWNER_LEASE_MS - 1);
  live.heartbeat();
  t.same(rows(), { slots: 1, leases: 2 }, 'within its lease: kept');
  clock.advance(1);
  live.heartbeat();
  t.same(rows(), { slots: 0, leases: 1 }, 'lease over: only the live replica\'s lease is left');
});

t.test("a live replica's slots outlast the lease while it keeps admitting", async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const a = sqliteReplica(t, dir, clock).limiter;
  const b = sqliteReplica(t, dir, clock).limiter;
  const keyLimits = { concurrentRequests: 1 };
  const long = callContext(clock, { keyLimits });
  t.equal(a.admit(long), undefined);
  for (let i = 0; i < 5; i++) {
    clock.advance(DEFAULT_OWNER_LEASE_MS / 2);
    // A keeps living: it admits for other keys, which renews its lease.
    a.admit(callContext(clock, { keyId: `other-${i}`, keyLimits }));
    t.equal(b.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', `B still refused after ${(i + 1) * 15} s`);
  }
});

t.test('a closed replica frees its slots at once', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const a = sqliteReplica(t, dir, clock).limiter;
  const b = new NodeRateLimiter(new SqliteLimitStore({ location: dir, clock, heartbeatTimer: false }), quietLogger);
  const keyLimits = { concurrentRequests: 1 };
  t.equal(b.admit(callContext(clock, { keyLimits })), undefined);
  b.close();
  t.equal(a.admit(callContext(clock, { keyLimits })), undefined);
});

t.test('three replica processes racing on one file admit exactly the limit', async (t) => {
  const dir = t.testdir();
  const file = path.join(dir, 'rate-limits.sqlite');
  const worker = tsEntry('test/edge-node/rate-limit/replica-worker.ts');
  const runs = await Promise.all(
    [1, 2, 3].map((n) => startProcess({ name: `replica-${n}`, ...worker, args: [...worker.args, file, String(T0), 'admit', '150', '200'], t })),
  );
  const admitted = await Promise.all(
    runs.map(async (run) => {
      const code = await run.exited;
      t.equal(code.code, 0, run.output());
      const result = parseJsonLines(run.output()).find((line) => 'admitted' in line);
      return Number(result?.admitted);
    }),
  );
  t.equal(admitted.reduce((sum, n) => sum + n, 0), 200, `admitted per replica: ${admitted.join(', ')}`);
});

t.test("a replica killed with -9 while holding slots: they expire with its lease", async (t) => {
  const dir = t.testdir();
  const worker = tsEntry('test/edge-node/rate-limit/replica-worker.ts');
  const holder = await startProcess({ name: 'holder', ...worker, args: [...worker.args, dir, String(T0), 'hold', '2', '2'], readyLine: /^holding$/, t });
  await holder.kill9();
  const clock = new ManualClock(T0 + 1000);
  const live = sqliteReplica(t, dir, clock).limiter;
  const keyLimits = { concurrentRequests: 2 };
  t.equal(live.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'the dead slots count within the lease');
  clock.advance(DEFAULT_OWNER_LEASE_MS - 1000); // the holder's lease began at T0
  t.equal(live.admit(callContext(clock, { keyLimits })), undefined);
  t.equal(live.admit(callContext(clock, { keyLimits })), undefined);
});
