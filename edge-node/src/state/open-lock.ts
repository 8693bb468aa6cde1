/**
 * One process at a time through a check-then-create step on a state file replicas share (is the
 * file there and sound? if not, make it): SQLite's exclusive lock on an empty lock file beside it.
 * Node has no flock, and SQLite's fcntl locks are dropped by the kernel when their process dies, so a
 * replica killed -9 mid-step never leaves the lock held. Used for rate-limits.sqlite
 * (rate-limit-file.ts) and spool.db (open-node-spool.ts).
 */
import { chmodSync, truncateSync } from 'node:fs';
import Database from 'better-sqlite3';
import { LOCK_FILE_ROLE, prepareStateFiles, stateFileOpenRefusal } from './state-database.js';
import { STATE_FILE_MODE, StateFileError } from './state-store.js';

/** How long a starting replica waits for another to finish its step (a check takes milliseconds). */
export const DEFAULT_OPEN_LOCK_WAIT_MS = 5_000;

interface HeldOpenLock {
  release(): void;
}

/** The lock stayed taken past the wait. */
class OpenLockBusyError extends StateFileError {}

function busyError(lockFile: string, waitMs: number, cause: unknown): OpenLockBusyError {
  return new OpenLockBusyError(lockFile, `stayed locked by another node-edge process opening the same state for over ${waitMs / 1000} s; start this one again once it is up`, { cause });
}

/** `busyWaitMs`: how long SQLite's busy handler blocks the thread; `waitMs`: the wait the message names. */
function takeOpenLock(lockFile: string, waitMs: number, busyWaitMs = waitMs): HeldOpenLock {
  // One left root's by a command run with sudo, or a directory at its path, is refused naming it,
  // its owner and what to do: SQLite would say only "unable to open database file".
  prepareStateFiles(lockFile, LOCK_FILE_ROLE);
  let lock: Database.Database;
  try {
    // The wait is SQLite's busy handler: the call blocks, which a starting process can afford.
    lock = new Database(lockFile, { timeout: busyWaitMs });
  } catch (err) {
    throw stateFileOpenRefusal(lockFile, err, LOCK_FILE_ROLE) ?? err;
  }
  try {
    try {
      // A lock file SQLite has just created has the umask's mode.
      chmodSync(lockFile, STATE_FILE_MODE);
    } catch (err) {
      throw stateFileOpenRefusal(lockFile, err, LOCK_FILE_ROLE) ?? err;
    }
    // The rollback journal in memory: BEGIN EXCLUSIVE on the empty file would write one, and a
    // full disk would then stop every start of the node (docs/spool.md, "Disk full").
    const begin = (): void => {
      lock.pragma('journal_mode = MEMORY');
      lock.exec('BEGIN EXCLUSIVE');
    };
    try {
      begin();
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      if (code === 'SQLITE_BUSY') {
        throw busyError(lockFile, waitMs, err);
      }
      if (code !== 'SQLITE_NOTADB') throw err;
      // Nothing is ever written to it, only its lock counts: content planted there is dropped
      // (the locks are on the file, not its content, so a holder keeps its lock).
      truncateSync(lockFile, 0);
      try {
        begin();
      } catch (again) {
        if ((again as { code?: unknown }).code !== 'SQLITE_BUSY') throw again;
        throw busyError(lockFile, waitMs, again);
      }
    }
  } catch (err) {
    lock.close();
    throw err;
  }
  return {
    release: () => {
      try {
        lock.exec('ROLLBACK');
      } finally {
        lock.close();
      }
    },
  };
}

/** Runs `fn` holding the lock of `lockFile` (created if missing). */
export function underOpenLock<T>(lockFile: string, fn: () => T, waitMs = DEFAULT_OPEN_LOCK_WAIT_MS): T {
  const lock = takeOpenLock(lockFile, waitMs);
  try {
    return fn();
  } finally {
    lock.release();
  }
}

/**
 * Callers in this process waiting for each lock file: the lock is per connection, so a second
 * caller in the process that holds the lock across an await would wait out its whole bound.
 */
const queues = new Map<string, Promise<unknown>>();

/** Between two tries of a lock another process holds. */
const RETRY_MS = 20;

/**
 * takeOpenLock without blocking the thread: a serving process (a replica applying a config push)
 * keeps answering callers while another holds the lock, trying again every RETRY_MS.
 */
async function takeOpenLockPolitely(lockFile: string, waitMs: number): Promise<HeldOpenLock> {
  const deadline = performance.now() + waitMs;
  for (;;) {
    try {
      return takeOpenLock(lockFile, waitMs, 0);
    } catch (err) {
      if (!(err instanceof OpenLockBusyError) || performance.now() >= deadline) throw err;
    }
    await new Promise((resolve) => setTimeout(resolve, Math.min(RETRY_MS, Math.max(1, deadline - performance.now()))));
  }
}

/** underOpenLock for a step that awaits (file reads and writes through the state store). */
export async function underOpenLockAsync<T>(lockFile: string, fn: () => Promise<T>, waitMs = DEFAULT_OPEN_LOCK_WAIT_MS): Promise<T> {
  const before = queues.get(lockFile) ?? Promise.resolve();
  const run = before.then(async () => {
    const lock = await takeOpenLockPolitely(lockFile, waitMs);
    try {
      return await fn();
    } finally {
      lock.release();
    }
  });
  const settled = run.catch(() => undefined);
  queues.set(lockFile, settled);
  void settled.then(() => {
    if (queues.get(lockFile) === settled) queues.delete(lockFile);
  });
  return run;
}
