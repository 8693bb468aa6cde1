// A replica (ZENOVA_NODE_REPLICAS > 1) that starts while another replica holds the shared limit
// file's write lock for longer than the 250 ms wait still starts: its first heartbeat is made
// later, its requests are admitted without limits while the file stays locked, and it counts and
// enforces the limits once the lock is free. Real files, a real second connection holding the lock.
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { createNodeRateLimiter } from '../../../edge-node/src/rate-limit/create-node-rate-limiter.js';
import { rateLimitStoreFailedFor } from '../../../edge-node/src/rate-limit/rate-limit-hits.js';
import { RATE_LIMIT_FILE, SqliteLimitStore } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { ManualClock, callContext, finish, quietLogger } from './limit-fixtures.js';

const env = { ZENOVA_NODE_REPLICAS: '2' };

/** Another replica stuck inside a write transaction until `free`. */
function holdWriteLock(dir: string): { free(): void } {
  const other = new Database(path.join(dir, RATE_LIMIT_FILE));
  other.exec('BEGIN IMMEDIATE');
  let held = true;
  return {
    free() {
      if (!held) return;
      held = false;
      other.exec('ROLLBACK');
      other.close();
    },
  };
}

t.test('a replica that starts while another replica holds the limit file locked starts, admits without limits, and enforces them once the lock is free', async (t) => {
  const dir = t.testdir();
  (await createNodeRateLimiter({ stateDir: dir, logger: quietLogger, env })).close(); // the file exists from an earlier replica
  const lock = holdWriteLock(dir);
  t.teardown(() => lock.free());
  const clock = new ManualClock();
  const limiter = await createNodeRateLimiter({ stateDir: dir, logger: quietLogger, env, clock });
  t.teardown(() => limiter.close());

  const keyLimits = { requestsPerMinute: 1 };
  const whileLocked = callContext(clock, { keyLimits });
  t.equal(limiter.admit(whileLocked), undefined, 'admitted while the file is locked');
  t.ok(rateLimitStoreFailedFor(whileLocked), 'and counted as let through without limits');
  finish(whileLocked);

  lock.free();
  const first = callContext(clock, { keyLimits });
  t.equal(limiter.admit(first), undefined, 'the first counted request is admitted');
  t.notOk(rateLimitStoreFailedFor(first), 'counted in the file');
  t.equal(limiter.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_RATE_LIMITED', 'the limit holds after the lock is free');
});

t.test('a start-up heartbeat that found the file locked is made by the retry timer once the lock is free, with no request in between', async (t) => {
  const dir = t.testdir();
  new SqliteLimitStore({ location: dir, clock: new ManualClock(), heartbeatTimer: false }).close();
  const lock = holdWriteLock(dir);
  t.teardown(() => lock.free());
  const clock = new ManualClock();
  const store = new SqliteLimitStore({ location: dir, clock, heartbeatTimer: false });
  t.teardown(() => store.close());
  t.ok(store.hasPendingWrites(), 'the missed heartbeat is remembered');
  lock.free();
  await waitFor(() => !store.hasPendingWrites(), { what: 'the retry timer to make the heartbeat' });
  const reader = new Database(path.join(dir, RATE_LIMIT_FILE), { readonly: true });
  t.teardown(() => reader.close());
  const lease = reader.prepare('SELECT expires_at FROM leases WHERE owner = ?').get(store.owner) as { expires_at: number } | undefined;
  t.ok(lease !== undefined && lease.expires_at > clock.hostMonotonic(), 'the replica holds a live lease');
});

t.test('a replica that stops while another replica holds the limit file locked stops without throwing', async (t) => {
  const dir = t.testdir();
  const limiter = await createNodeRateLimiter({ stateDir: dir, logger: quietLogger, env });
  const lock = holdWriteLock(dir);
  t.teardown(() => lock.free());
  t.doesNotThrow(() => limiter.close(), 'its slots and lease are left to expire with the lease');
});
