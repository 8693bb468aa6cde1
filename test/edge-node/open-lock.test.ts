// The open lock replicas share (state/open-lock.ts). underOpenLockAsync runs in a serving process
// (a config push applied under config-apply.lock): while another holder has the lock it waits
// without blocking the event loop, so the process goes on answering callers; the synchronous
// variant, for start-up only, may block. Past its bound both give up naming the lock file.
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { underOpenLock, underOpenLockAsync } from '../../edge-node/src/state/open-lock.js';
import { StateFileError } from '../../edge-node/src/state/state-store.js';
import { waitFor } from '../fixtures/wait-for.js';

/** Another holder of `lockFile`'s lock (a second connection: SQLite locks between them as between processes). */
function holdLock(lockFile: string): { release(): void } {
  const db = new Database(lockFile);
  db.pragma('journal_mode = MEMORY');
  db.exec('BEGIN EXCLUSIVE');
  return {
    release: () => {
      db.exec('ROLLBACK');
      db.close();
    },
  };
}

t.test('waiting for a lock another holds leaves the event loop free, and the step runs once it is released', async (t) => {
  const lockFile = path.join(t.testdir({}), 'config-apply.lock');
  underOpenLock(lockFile, () => undefined);
  const other = holdLock(lockFile);
  let ticks = 0;
  const ticker = setInterval(() => ticks++, 5);
  t.teardown(() => clearInterval(ticker));
  let ran = false;
  const step = underOpenLockAsync(lockFile, async () => {
    ran = true;
  });
  let settled = false;
  step.then(() => (settled = true), () => (settled = true));
  // The ticks below only come while the wait yields to the event loop; a wait that held the loop
  // would let them come only once it had given up (settled).
  const ticksAtStart = ticks;
  await waitFor(() => ticks - ticksAtStart >= 5, { what: '5 ticks of the event loop' });
  t.notOk(settled, `the event loop ran meanwhile (${ticks - ticksAtStart} ticks), the step still waiting`);
  t.notOk(ran, 'not while the other holds it');
  other.release();
  await step;
  t.ok(ran, 'then the step ran');
});

t.test('a lock held past the wait fails naming the file', async (t) => {
  const lockFile = path.join(t.testdir({}), 'config-apply.lock');
  underOpenLock(lockFile, () => undefined);
  const other = holdLock(lockFile);
  t.teardown(() => other.release());
  const err = await underOpenLockAsync(lockFile, async () => undefined, 100).then(() => undefined, (e: unknown) => e);
  t.type(err, StateFileError);
  t.match((err as Error).message, /config-apply\.lock: stayed locked .* over 0\.1 s/);
  t.throws(() => underOpenLock(lockFile, () => undefined, 100), /stayed locked/);
});
