// The control link leader against a real control-link.sqlite: a holder whose lock writes fail (here
// another connection holds the write lock, as a full disk makes every write fail) keeps its link, since
// no other process can take the lock either; it gives the link up only when it reads another live
// holder in the lock, and then /readyz's view says disconnected, never its own old status file.
import { rmSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { fillDisk, mountSmallDisk, tmpfsSkip } from '../fixtures/small-disk.js';
import type { Test } from 'tap';
import type { ConnectLoop } from '../../edge-node/src/control/connect-loop.js';
import { startControlLinkLeader } from '../../edge-node/src/control/control-link-leader.js';
import type { ControlLinkLeader } from '../../edge-node/src/control/control-link-leader.js';
import { CONTROL_LINK_LOCK_FILE } from '../../edge-node/src/control/control-link-lock.js';
import { saveControlStatus } from '../../edge-node/src/control/control-status.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import type { StateStore } from '../../edge-node/src/state/state-store.js';
import { waitFor } from '../fixtures/wait-for.js';

type Line = Record<string, unknown>;

const INTERVAL_MS = 50;
const TTL_MS = 300;

interface Started {
  leader: ControlLinkLeader;
  store: StateStore;
  lines: Line[];
  stops: unknown[];
  follows: () => number;
  /** A second connection to the lock file, as another replica (or the test) has it. */
  other: Database.Database;
}

async function startLeader(t: Test, opts: { dir?: string; ttlMs?: number } = {}): Promise<Started> {
  const dir = opts.dir ?? t.testdir({});
  const store = await openStateStore(dir, { create: true });
  const lines: Line[] = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Line) } });
  const stops: unknown[] = [];
  let follows = 0;
  const since = new Date();
  const fakeLink = (): ConnectLoop => ({
    status: () => ({ state: 'connected', since, lastError: null, sessionId: 's' }),
    configChanged: () => Promise.resolve(),
    stop: (options) => {
      stops.push(options);
      return Promise.resolve();
    },
  });
  const leader = startControlLinkLeader({
    store,
    logger,
    startLink: fakeLink,
    follow: () => {
      follows += 1;
      return Promise.resolve();
    },
    intervalMs: INTERVAL_MS,
    // Any holder the test writes counts as a live process (its pid is made up).
    lock: { ttlMs: opts.ttlMs ?? TTL_MS, isHolderAlive: () => true },
  });
  t.teardown(() => leader.stop());
  await waitFor(() => leader.isHolder(), { what: 'the leader to hold the link' });
  const other = new Database(path.join(dir, CONTROL_LINK_LOCK_FILE));
  other.pragma('busy_timeout = 1000');
  t.teardown(() => {
    if (other.inTransaction) other.exec('ROLLBACK');
    other.close();
  });
  return { leader, store, lines, stops, follows: () => follows, other };
}

/** The renew failure's line (the code's; before the fix, a warning without one). */
const renewFailed = (l: Line): boolean => l.code === 'CONTROL_LINK_LOCK_FAILING' || l.code === 'STATE_DIR_FULL' || l.msg === 'could not renew the control link lock';

/** Another process's row in the lock, renewed now. */
function writeOtherHolder(db: Database.Database, pid: number): void {
  db.prepare('update control_link_holder set owner = ?, pid = ?, renewed_at = ? where slot = 1').run('another-replica', pid, Date.now());
}

t.test('a single holder whose lock renew fails keeps its link past the TTL and says so once, then once when it recovers', async (t) => {
  const { leader, lines, stops, other } = await startLeader(t);
  // Every write to the lock now fails (SQLITE_BUSY here; SQLITE_FULL on a full disk): no process can take it.
  other.exec('BEGIN IMMEDIATE');
  const failedAt = Date.now();
  await waitFor(() => lines.find(renewFailed), { what: 'the renew failure to be logged' });
  // The TTL is the old give-up point: hold on well past it, checking at every poll.
  let letGo = false;
  await waitFor(
    () => {
      if (!leader.isHolder()) letGo = true;
      return Date.now() - failedAt > 3 * TTL_MS;
    },
    { what: 'three TTLs with failing renews', intervalMs: INTERVAL_MS },
  );
  t.equal(letGo, false, 'it held the link throughout');
  t.same(stops, [], 'the link was never stopped');
  t.equal(leader.view().connected, true);
  const failing = lines.filter(renewFailed);
  t.equal(failing.length, 1, 'the failure is logged once');
  t.match(failing[0], { code: 'CONTROL_LINK_LOCK_FAILING', level: 50, stateDir: String });
  t.notOk(lines.some((l) => typeof l.msg === 'string' && l.msg.includes('another node-edge process holds the control link')), 'no other process is blamed');

  other.exec('ROLLBACK');
  await waitFor(() => lines.find((l) => l.msg === 'the control link lock can be renewed again'), { what: 'the recovery to be logged' });
  t.equal(leader.isHolder(), true);
});

t.test('a holder whose renew fails still gives the link up when it reads another live holder in the lock', async (t) => {
  // A long TTL: the other holder cannot renew while the test blocks writes, and must stay fresh.
  const { leader, store, lines, stops, follows, other } = await startLeader(t, { ttlMs: 60_000 });
  // This process's own status file, as its link last wrote it: connected.
  await saveControlStatus(store, { connected: true, since: new Date().toISOString(), lastError: null, sessionId: 's', pid: process.pid, serving: true, updatedAt: new Date().toISOString() });
  // Another replica took the row, and writes fail from then on (one synchronous step: no tick in between).
  writeOtherHolder(other, 999_999);
  other.exec('BEGIN IMMEDIATE');
  await waitFor(() => !leader.isHolder(), { what: 'the link to be given up' });
  t.match(stops, [{ handedOver: { code: 'CONTROL_LINK_HANDED_OVER', message: /pid 999999/ } }]);
  t.match(lines.find((l) => l.msg === 'another node-edge process holds the control link now; this one stops its link and follows'), { holderPid: 999_999 });
  // Following now: its own status file (still saying connected) is not the holder's link.
  const followed = follows();
  await waitFor(() => follows() >= followed + 3, { what: 'three follow ticks' });
  t.match(leader.view(), { connected: false, problem: { code: 'CONTROL_LINK_HANDED_OVER' } });
});

t.test('another live holder that took the lock takes the link over as before', async (t) => {
  // A long TTL: the row the test wrote stays fresh however late the next tick runs.
  const { leader, stops, other } = await startLeader(t, { ttlMs: 60_000 });
  writeOtherHolder(other, 999_998);
  await waitFor(() => !leader.isHolder(), { what: 'the link to be given up' });
  t.equal(stops.length, 1);
  t.equal(leader.view().connected, false);
});

t.test("a holder on a state dir whose disk is full keeps its link and logs the full disk once, naming the state dir", { skip: tmpfsSkip() }, async (t) => {
  // Unmounted lazily: the leader's and the test's connections may still have files open on it.
  const dir = mountSmallDisk(t, '1m');
  const { leader, lines, stops } = await startLeader(t, { dir });
  const filler = fillDisk(dir);
  const full = await waitFor(() => lines.find(renewFailed), { what: 'the renew failure to be logged' });
  const failedAt = Date.now();
  let letGo = false;
  await waitFor(
    () => {
      if (!leader.isHolder()) letGo = true;
      return Date.now() - failedAt > 3 * TTL_MS;
    },
    { what: 'three TTLs on a full disk', intervalMs: INTERVAL_MS },
  );
  t.equal(letGo, false, 'it held the link throughout');
  t.same(stops, []);
  t.match(full, { code: 'STATE_DIR_FULL', level: 50, stateDir: dir, msg: /disk is full/ });
  t.equal(lines.filter(renewFailed).length, 1, 'logged once');

  rmSync(filler);
  await waitFor(() => lines.find((l) => l.msg === 'the control link lock can be renewed again'), { what: 'the recovery to be logged' });
  t.equal(leader.isHolder(), true);
});
