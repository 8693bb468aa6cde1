// The control link lock is timed on the host's monotonic clock, not the wall clock: a wall-clock step
// back (NTP correcting a clock that ran ahead) no longer leaves a killed holder's row fresh for the
// length of the step, nor does a step forward let a replica take the link from a live holder. A row
// renewed "later" than the host's monotonic now was written before the host booted. Rows written by
// an earlier release (no host-clock column) are judged on the wall clock, as that release judges ours.
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import { CONTROL_LINK_LOCK_FILE, ControlLinkLock } from '../../edge-node/src/control/control-link-lock.js';
import type { ControlLinkLockOptions } from '../../edge-node/src/control/control-link-lock.js';

const TTL_MS = 10_000;
const HOUR_MS = 3_600_000;

/** A clock moved by hand: the wall clock and the host's monotonic clock, each on its own. */
function handClock(): { wall: number; host: number; opts: () => ControlLinkLockOptions } {
  const clock = {
    wall: 1_800_000_000_000,
    host: 50_000_000,
    // Holders in another pid namespace: not checkable by pid, they age out by the TTL alone.
    opts: (): ControlLinkLockOptions => ({ ttlMs: TTL_MS, now: () => clock.wall, hostMonotonic: () => clock.host, isHolderAlive: () => true }),
  };
  return clock;
}

function lockPair(t: Test, clock: ReturnType<typeof handClock>): [ControlLinkLock, ControlLinkLock] {
  const dir = t.testdir({});
  const a = new ControlLinkLock(dir, clock.opts());
  const b = new ControlLinkLock(dir, clock.opts());
  t.teardown(() => {
    a.close();
    b.close();
  });
  return [a, b];
}

t.test('a holder that stopped renewing is taken over after the TTL even when the wall clock stepped back an hour', async (t) => {
  const clock = handClock();
  const [holder, replica] = lockPair(t, clock);
  t.match(holder.tryAcquire(), { outcome: 'acquired' });
  // The holder is killed; the wall clock steps back an hour; the host's clock runs on past the TTL.
  clock.wall -= HOUR_MS;
  clock.host += TTL_MS + 1;
  t.match(replica.tryAcquire(), { outcome: 'acquired', why: 'holder-expired' });
});

t.test('a live holder keeps the link when the wall clock steps forward an hour', async (t) => {
  const clock = handClock();
  const [holder, replica] = lockPair(t, clock);
  t.match(holder.tryAcquire(), { outcome: 'acquired' });
  clock.wall += HOUR_MS;
  clock.host += 1_000;
  t.match(replica.tryAcquire(), { outcome: 'busy' });
  t.equal(replica.liveOtherHolder()?.owner, holder.owner, 'a read sees the live holder too');
  t.equal(holder.renew(), true, 'the holder still holds it');
});

t.test('a renewal ahead of the host clock was made before the host booted: the row is stale', async (t) => {
  const clock = handClock();
  const [holder, replica] = lockPair(t, clock);
  t.match(holder.tryAcquire(), { outcome: 'acquired' });
  // A reboot: the host's monotonic clock starts again near 0; the wall clock is where it was.
  clock.host = 5_000;
  t.match(replica.tryAcquire(), { outcome: 'acquired', why: 'holder-expired' });
});

t.test("a row an earlier release's replica holds (no host-clock column) is judged on the wall clock, and that replica reads ours the same way", async (t) => {
  const clock = handClock();
  const dir = t.testdir({});
  // The table as the earlier release made it, its holder's row renewed just now on the wall clock.
  const old = new Database(path.join(dir, CONTROL_LINK_LOCK_FILE));
  t.teardown(() => old.close());
  old.exec(`create table control_link_holder (slot integer primary key check (slot = 1), owner text not null, pid integer not null, pid_ns text, start_ticks text, acquired_at integer not null, renewed_at integer not null)`);
  const insertOld = old.prepare('insert or replace into control_link_holder (slot, owner, pid, pid_ns, start_ticks, acquired_at, renewed_at) values (1, ?, 4242, null, null, ?, ?)');
  insertOld.run('earlier-release', clock.wall, clock.wall);
  const lock = new ControlLinkLock(dir, clock.opts());
  t.teardown(() => lock.close());
  t.match(lock.tryAcquire(), { outcome: 'busy', holder: { owner: 'earlier-release', renewedAtHostMs: null } }, 'fresh on the wall clock: busy');
  clock.wall += TTL_MS + 1;
  t.match(lock.tryAcquire(), { outcome: 'acquired', why: 'holder-expired' }, 'not renewed for the TTL on the wall clock: taken');
  // What the earlier release reads of our row: renewed_at on the wall clock, kept current by renew().
  clock.wall += 2_000;
  t.equal(lock.renew(), true);
  t.equal(old.prepare('select renewed_at from control_link_holder where slot = 1').pluck().get(), clock.wall);
  // Its insert names the old columns only, and still works on the table with the new one.
  insertOld.run('earlier-release', clock.wall, clock.wall);
  t.match(lock.holder(), { owner: 'earlier-release', renewedAtHostMs: null });
});
