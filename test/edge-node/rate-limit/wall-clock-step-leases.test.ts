// Replica leases run on the host's monotonic clock, so a wall clock that steps (NTP, a hand-set
// date, a VM resume) neither frees a live replica's concurrency slots nor keeps a dead one's past
// its lease. The heartbeat timers are off and beaten by hand, exactly as the 10 s interval fires.
// The real clock's reading is checked against another process's: leases need one count host-wide.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import t from 'tap';
import { systemClock } from '../../../edge-node/src/pipeline/clock.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { DEFAULT_OWNER_LEASE_MS, SqliteLimitStore } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { ManualClock, T0, callContext, quietLogger, sqliteReplica } from './limit-fixtures.js';

const keyLimits = { concurrentRequests: 2 };

t.test("a wall clock that steps forward 31 s between heartbeats never frees a live replica's slots", async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock(T0 + 5_000);
  const a = sqliteReplica(t, dir, clock);
  const b = sqliteReplica(t, dir, clock);
  t.equal(a.limiter.admit(callContext(clock, { keyLimits })), undefined, 'A admits a long request');
  t.equal(a.limiter.admit(callContext(clock, { keyLimits })), undefined, 'and a second one: the limit is full');
  clock.advance(5_000);
  a.store.heartbeat();
  b.store.heartbeat();
  t.equal(b.limiter.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'B is refused while A holds both');
  clock.advance(2_000); // A's next beat is due 8 s from now
  clock.ms += 31_000; // the wall clock steps; the monotonic clocks do not
  for (let i = 1; i <= 2; i++) {
    t.equal(b.limiter.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', `B's request ${i} after the step is refused: A still runs both`);
  }
});

t.test("a wall clock that steps back an hour never keeps a dead replica's slots past its lease", async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock(T0 + 5_000);
  const live = sqliteReplica(t, dir, clock).limiter;
  const dying = new SqliteLimitStore({ location: dir, clock, heartbeatTimer: false });
  const dyingLimiter = new NodeRateLimiter(dying, quietLogger);
  t.equal(dyingLimiter.admit(callContext(clock, { keyLimits })), undefined);
  t.equal(dyingLimiter.admit(callContext(clock, { keyLimits })), undefined);
  dying.abandon(); // as kill -9: slots and lease stay in the file
  clock.ms -= 3_600_000; // the wall clock steps back
  clock.advance(DEFAULT_OWNER_LEASE_MS - 1);
  t.equal(live.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'still within the lease');
  clock.advance(1);
  t.equal(live.admit(callContext(clock, { keyLimits })), undefined, 'lease over: one slot free');
  t.equal(live.admit(callContext(clock, { keyLimits })), undefined, 'both slots free, not an hour later');
});

t.test('slots left by replicas before a reboot (the monotonic clock started again near 0) stop counting at once', async (t) => {
  const dir = t.testdir();
  const before = new ManualClock(T0 + 5_000);
  const dying = new SqliteLimitStore({ location: dir, clock: before, heartbeatTimer: false });
  const dyingLimiter = new NodeRateLimiter(dying, quietLogger);
  t.equal(dyingLimiter.admit(callContext(before, { keyLimits })), undefined);
  t.equal(dyingLimiter.admit(callContext(before, { keyLimits })), undefined);
  dying.abandon(); // the host went down with the replica
  // After the boot the monotonic clock counts from near 0 again, far below the leases in the file.
  const after = new ManualClock(T0 + 120_000, 12_000);
  const live = sqliteReplica(t, dir, after).limiter;
  t.equal(live.admit(callContext(after, { keyLimits })), undefined, 'one slot free');
  t.equal(live.admit(callContext(after, { keyLimits })), undefined, 'both slots free');
  t.equal(live.admit(callContext(after, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'the live ones count');
});

t.test("the system clock's host-monotonic reading is the same count in another process on the host", async (t) => {
  const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
  const clockUrl = new URL('../../../edge-node/src/pipeline/clock.ts', import.meta.url).href;
  const script = `import { systemClock } from ${JSON.stringify(clockUrl)}; process.stdout.write(String(systemClock.hostMonotonic()));`;
  const before = systemClock.hostMonotonic();
  const inChild = Number(execFileSync(process.execPath, ['--import', tsxLoader, '--input-type=module', '-e', script], { encoding: 'utf8' }));
  const after = systemClock.hostMonotonic();
  t.ok(before <= inChild && inChild <= after, `the child read ${inChild}, between this process's ${before} and ${after}`);
});
