/**
 * Whether the process that opened a spool row still runs, answered by a kernel lock rather than
 * by its pid: a pid means nothing in another pid namespace (a container restart gets a new one), so
 * a row of a node killed -9 there was taken for a live replica's and never recorded.
 *
 * Each SpoolStore holds one owner slot for its life: `spool-owner-<n>.lock` beside spool.db, a
 * SQLite file kept in `locking_mode=EXCLUSIVE` with a write done, so the connection holds SQLite's
 * exclusive fcntl lock until it closes or the process dies (the kernel drops it, however the
 * process ended). fcntl locks belong to the host's kernel, so they are seen across pid namespaces
 * of one host; SQLite also sees them between connections of one process. A store takes the first
 * slot no live process holds (files are reused, never deleted), and its open rows name the slot.
 *
 * A row's writer is gone when its slot can be locked by someone else, or when the slot is this
 * store's own (a slot is only taken once its previous holder is gone). A holder recovers every
 * row naming its slot as soon as it takes it, so a busy slot's rows are its live holder's.
 */
import { closeSync, chmodSync, constants, lstatSync, openSync, readdirSync, truncateSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { LOCK_FILE_ROLE, prepareStateFiles, stateFileOpenRefusal } from '../state/state-database.js';
import { STATE_FILE_MODE, StateFileError } from '../state/state-store.js';

/** `spool-owner-<n>.lock` (the installer accepts these names in data/: install-dir-contents.ts). */
export function spoolOwnerLockFile(spoolFile: string, slot: number): string {
  return path.join(path.dirname(spoolFile), `spool-owner-${slot}.lock`);
}

/**
 * `spool-owner-sole.lock`: held, as a slot is, by a process at ZENOVA_NODE_REPLICAS=1 (counters in
 * its memory) for its life, so that one started beside it at a higher setting can tell and refuse.
 */
export function soleProcessLockFile(spoolFile: string): string {
  return path.join(path.dirname(spoolFile), 'spool-owner-sole.lock');
}

/** Whether a state dir entry is an owner slot or the sole-process lock. */
export function isSpoolLockFileName(entry: string): boolean {
  return /^spool-owner-(\d{1,4}|sole)\.lock$/.test(entry);
}

/** No node runs this many processes on one state dir; a bound keeps a fault from looping for ever. */
export const MAX_OWNER_SLOTS = 4096;

function isBusy(err: unknown): boolean {
  const code = (err as { code?: string }).code;
  return code === 'SQLITE_BUSY' || code === 'SQLITE_LOCKED';
}

/**
 * The slot file is not a sound SQLite file (garbage, a cut header). SQLite takes the lock before it
 * reads the file, so a slot a live process holds answers SQLITE_BUSY, never this: a damaged slot
 * is a free one.
 */
function isDamaged(err: unknown): boolean {
  const code = (err as { code?: string }).code;
  return code === 'SQLITE_NOTADB' || code === 'SQLITE_CORRUPT';
}

/** Creates the slot file owner-only if missing (its lock, not its content, is what counts). */
function ensureSlotFile(file: string): void {
  try {
    // O_EXCL: a file that exists may be locked by its holder, and closing a descriptor of it in
    // this process would drop this process's own fcntl locks on it; a new file has none.
    closeSync(openSync(file, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, STATE_FILE_MODE));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
}

/**
 * Every slot this process holds, until release(). A better-sqlite3 connection nobody references is
 * closed when the garbage collector takes it, and its lock goes with it: a store dropped without
 * close() (or an owner that kept no reference) would then hand its live rows to the next starting
 * replica as interrupted. Held here, a slot lasts until release() or the process's death.
 */
const heldSlots = new Set<SpoolOwnerLock>();

/** The slot this process holds until release() (or its death). */
export class SpoolOwnerLock {
  readonly slot: number;
  private readonly db: Database.Database;

  private constructor(slot: number, db: Database.Database) {
    this.slot = slot;
    this.db = db;
  }

  /** Takes the lowest slot no live process holds. */
  static acquire(spoolFile: string): SpoolOwnerLock {
    for (let slot = 0; slot < MAX_OWNER_SLOTS; slot += 1) {
      const outcome = SpoolOwnerLock.take(slot, spoolOwnerLockFile(spoolFile, slot));
      if (outcome !== 'busy') return outcome;
    }
    throw new Error(`every spool owner slot (${MAX_OWNER_SLOTS}) beside ${spoolFile} is held by a live process`);
  }

  /** Takes the sole-process lock (soleProcessLockFile); undefined when a live process holds it. */
  static acquireSole(spoolFile: string): SpoolOwnerLock | undefined {
    const outcome = SpoolOwnerLock.take(-1, soleProcessLockFile(spoolFile));
    return outcome === 'busy' ? undefined : outcome;
  }

  private static take(slot: number, file: string): SpoolOwnerLock | 'busy' {
    const outcome = SpoolOwnerLock.tryTake(slot, file);
    if (outcome !== 'damaged') return outcome;
    // The file holds no data, only its lock matters, and nobody holds it (isDamaged): emptied
    // in place it is a new slot file. Truncated, never unlinked or replaced: another process
    // may have it open, and a lock taken on a file no longer at this path would guard nothing.
    // The descriptor truncateSync opens and closes cannot drop a lock of this process, which
    // holds none on a slot that answered this. Two starters may both empty it: whichever then
    // locks it keeps it (the lock does not depend on the content), the other finds it busy.
    truncateSync(file, 0);
    const again = SpoolOwnerLock.tryTake(slot, file);
    if (again === 'damaged') throw new StateFileError(file, 'is not a SQLite file even after it was emptied; move it aside and start again');
    return again;
  }

  /** The slot's lock, or why not: held by a live process (busy), or its file is damaged. */
  private static tryTake(slot: number, file: string): SpoolOwnerLock | 'busy' | 'damaged' {
    ensureSlotFile(file);
    // A slot file left root's by a command run with sudo, or a directory at its path, is refused
    // naming it, its owner and what to do: SQLite would say only "unable to open database file".
    prepareStateFiles(file, LOCK_FILE_ROLE);
    let db: Database.Database;
    try {
      // timeout 0: a held slot answers SQLITE_BUSY at once (better-sqlite3 waits 5 s by default).
      db = new Database(file, { fileMustExist: true, timeout: 0 });
    } catch (err) {
      throw stateFileOpenRefusal(file, err, LOCK_FILE_ROLE) ?? err;
    }
    try {
      chmodSync(file, STATE_FILE_MODE);
      db.pragma('locking_mode = EXCLUSIVE');
      // No journal file beside it: the content does not matter, only the lock.
      db.pragma('journal_mode = MEMORY');
      // The first write in EXCLUSIVE mode takes the exclusive lock, and it is kept until close.
      db.pragma(`user_version = ${process.pid}`);
      const lock = new SpoolOwnerLock(slot, db);
      heldSlots.add(lock);
      return lock;
    } catch (err) {
      db.close();
      if (isBusy(err)) return 'busy';
      if (isDamaged(err)) return 'damaged';
      const refusal = stateFileOpenRefusal(file, err, LOCK_FILE_ROLE);
      if (refusal !== undefined) throw refusal;
      const code = (err as { code?: unknown }).code;
      if (typeof code === 'string' && code.startsWith('SQLITE_')) {
        throw new StateFileError(file, `cannot be used as the spool's owner slot (${code}: ${(err as Error).message})`, { cause: err });
      }
      throw err;
    }
  }

  /** Gives the slot up: rows still naming it count as their writer's gone (interrupted). */
  release(): void {
    heldSlots.delete(this);
    this.db.close();
  }
}

/**
 * Whether a live process other than this connection's holds `slot`: its exclusive lock refuses
 * ours at once. A missing file was never held (or not by anyone alive). Never creates a file.
 */
export function isOwnerSlotHeld(spoolFile: string, slot: number): boolean {
  return isLockFileHeld(spoolOwnerLockFile(spoolFile, slot));
}

/** Whether a live process at ZENOVA_NODE_REPLICAS=1 serves from this spool (it holds soleProcessLockFile). */
export function isSoleProcessLockHeld(spoolFile: string): boolean {
  return isLockFileHeld(soleProcessLockFile(spoolFile));
}

function isLockFileHeld(file: string): boolean {
  // A link is no node-edge's lock (a start refuses one: refuseSymlinkedSpoolFiles), and opening it
  // would lock whatever it leads to.
  try {
    if (lstatSync(file).isSymbolicLink()) return false;
  } catch {
    return false; // absent: never held
  }
  let db: Database.Database;
  try {
    db = new Database(file, { fileMustExist: true, timeout: 0 });
  } catch (err) {
    if ((err as { code?: string }).code === 'SQLITE_CANTOPEN') return false;
    throw err;
  }
  try {
    db.exec('begin immediate');
    db.exec('rollback');
    return false;
  } catch (err) {
    if (isBusy(err)) return true;
    // A held slot answers busy before its content is read: a damaged one is nobody's.
    if (isDamaged(err)) return false;
    throw err;
  } finally {
    db.close();
  }
}

/** Whether a live process holds any owner slot beside `spoolFile`: a node-edge has the spool open. */
export function isSpoolHeldOpen(spoolFile: string): boolean {
  return isOwnerSlotHeldByAnother(spoolFile, undefined);
}

/**
 * Whether a live process holds an owner slot beside `spoolFile` other than `ownSlot` (this process's:
 * SQLite sees its lock between connections of one process too): another node-edge serves from this
 * state dir.
 */
export function isOwnerSlotHeldByAnother(spoolFile: string, ownSlot: number | undefined): boolean {
  return readdirSync(path.dirname(spoolFile)).some((entry) => {
    const slot = /^spool-owner-(\d{1,4})\.lock$/.exec(entry)?.[1];
    return slot !== undefined && Number(slot) !== ownSlot && isOwnerSlotHeld(spoolFile, Number(slot));
  });
}
