/**
 * Opens (creating) a SQLite file in the node's state dir that the node's replicas may share:
 * owner-only like the rest of the state dir (the -wal/-shm files inherit the mode), WAL so readers
 * never wait for the one writer, a busy_timeout so writers queue for the lock instead of failing
 * (briefly: better-sqlite3 is synchronous, so a wait blocks the event loop), and its schema created
 * if missing. Each caller picks its durability (`synchronous`).
 *
 * A state file node-edge may not use (left root's by a command run with sudo, a directory at its
 * path) is refused naming it, its owner and what to do: SQLite's own error says only "unable to
 * open database file". The lock files of state/open-lock.ts and spool/spool-owner-lock.ts are
 * opened through the same checks (stateFileOpenRefusal).
 *
 * A symbolic link at a state file's path (or its -wal/-shm's) is refused too, never followed: SQLite
 * opens the database a link leads to, and the chmod and truncation done here would reach that file,
 * which may be another user's, or a copy that is not this node's (a restore by hand). Nothing in the
 * product puts links in the state dir; the state dir itself may be reached through one.
 */
import { accessSync, chmodSync, constants, lstatSync, readlinkSync, statSync } from 'node:fs';
import type { Stats } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { STATE_FILE_MODE, StateAccessDeniedError, StateFileError } from './state-store.js';

/** What a state file is, for the refusals that name it. */
export interface StateFileRole {
  /** What the file should be: "the credit lease book", "a lock file". */
  kind: string;
  /** What to do about a directory found at its path. */
  ifDirectory: string;
  /** What to do about a symbolic link found at its path (or at its -wal/-shm's). */
  ifSymlink: string;
}

/** The role of a SQLite state file whose caller names none (it holds nothing a new file would miss for good). */
const SQLITE_STATE_FILE: StateFileRole = {
  kind: 'a SQLite file',
  ifDirectory: 'move it aside: node-edge makes the file anew',
  ifSymlink: "if it leads to this node's own file (put back by hand), move that file here in place of the link; otherwise remove the link: node-edge makes the file anew",
};

/** An empty file only its SQLite lock counts on (open-lock.ts, spool-owner-lock.ts). */
export const LOCK_FILE_ROLE: StateFileRole = {
  kind: 'a lock file',
  ifDirectory: 'move it aside (no node-edge can hold a lock on a directory): node-edge creates the lock file again',
  ifSymlink: 'remove the link (only a lock counts in a lock file, never its content): node-edge creates the lock file again',
};

export interface StateDatabaseOptions {
  busyTimeoutMs: number;
  synchronous: 'OFF' | 'NORMAL' | 'FULL';
  /** Idempotent DDL (CREATE … IF NOT EXISTS), run on every open. */
  schema: string;
  /** Named in a refusal; a plain SQLite file by default. */
  role?: StateFileRole;
}

/** How opening a file fails when this process may not use it, or it is not a file (SQLite says CANTOPEN for all). */
const OPEN_FAILURE_CODES = new Set(['SQLITE_CANTOPEN', 'SQLITE_READONLY', 'SQLITE_PERM', 'EACCES', 'EPERM', 'EISDIR', 'ENOTDIR']);

const isAccessError = (err: unknown): boolean => ['EACCES', 'EPERM'].includes((err as NodeJS.ErrnoException).code ?? '');

/**
 * The refusal for `file` (whose stat is `info`) when this process may not read and write it, or
 * make it 0600 as it does every state file (only its owner or root may); undefined when it may.
 * `denied`: an access error was already met on it.
 */
function accessRefusal(file: string, info: Stats, cause: unknown, denied = false): StateAccessDeniedError | undefined {
  const me = process.getuid?.();
  if (me === undefined || me === 0) return undefined;
  let refused = denied || (info.uid !== me && (info.mode & 0o777) !== STATE_FILE_MODE);
  try {
    accessSync(file, constants.R_OK | constants.W_OK);
  } catch (err) {
    if (isAccessError(err)) refused = true;
  }
  if (!refused) return undefined;
  return new StateAccessDeniedError(file, { ...(cause !== undefined ? { cause } : {}), owner: { uid: info.uid, mode: info.mode }, use: 'read-write' });
}

/**
 * What an error met opening (or chmodding) `file` means for the operator, as a StateFileError naming
 * the file — its owner and the chown or chmod, or that it is a directory — or undefined when it is
 * none of those (the caller's own handling applies). `serve` prints it as one line, exit 2.
 */
export function stateFileOpenRefusal(file: string, err: unknown, role: StateFileRole): StateFileError | undefined {
  const code = (err as { code?: unknown }).code;
  if (typeof code !== 'string' || !OPEN_FAILURE_CODES.has(code)) return undefined;
  let info: Stats;
  try {
    info = statSync(file);
  } catch (statErr) {
    if ((statErr as NodeJS.ErrnoException).code === 'ENOTDIR') {
      return new StateFileError(file, 'cannot be opened: a part of its path is not a directory', { cause: err });
    }
    // Gone meanwhile, or its dir unreadable (serve checks the dir first, with its own message).
    return undefined;
  }
  if (info.isDirectory()) return new StateFileError(file, `is a directory, not ${role.kind}; ${role.ifDirectory}`, { cause: err });
  return accessRefusal(file, info, err, isAccessError(err));
}

/** The refusal for `link`, a symbolic link at the path of a state file or of its -wal/-shm; the link and its target are left as they are. */
export function symlinkRefusal(link: string, role: StateFileRole): StateFileError {
  let target: string;
  try {
    target = path.resolve(path.dirname(link), readlinkSync(link));
  } catch {
    target = 'somewhere it no longer says'; // replaced meanwhile
  }
  return new StateFileError(
    link,
    `is a symbolic link (to ${target}), not ${role.kind}; node-edge follows no link in its state dir (one can lead to another user's file, or to a copy that is not this node's), ` +
      `and left both as they are: ${role.ifSymlink}`,
  );
}

/**
 * Refuses a symbolic link at `file` or at its -wal/-shm (symlinkRefusal). lstat only: nothing is
 * opened, so this may run before any check that would follow the link (a stat, an open).
 */
export function refuseSymlinkedStateFiles(file: string, role: StateFileRole): void {
  for (const f of [file, `${file}-wal`, `${file}-shm`]) {
    let isLink: boolean;
    try {
      isLink = lstatSync(f).isSymbolicLink();
    } catch {
      continue; // absent; anything stranger is met by the caller's checks, with their own messages
    }
    if (isLink) throw symlinkRefusal(f, role);
  }
}

/**
 * Before a connection opens `file`: a symbolic link at its path or its -wal/-shm's is refused (SQLite
 * would open what it leads to), a directory at its path is refused, and so is the file or a
 * -wal/-shm beside it that node-edge may not read and write (another user's: left root's by a
 * command run with sudo) — named, with its owner and the chown. This user's own files, and the
 * sidecars a crash left, are made owner-only first (0600): an older release created
 * credit-leases.sqlite's at the umask's 0644, and whatever mode a restore left (000 too) is this
 * user's to correct, as for spool.db. By path, never through a descriptor: closing one would drop
 * this process's SQLite locks on the file. lstat, so the chmod never reaches a link's target.
 */
export function prepareStateFiles(file: string, role: StateFileRole): void {
  for (const f of [file, `${file}-wal`, `${file}-shm`]) {
    let info: Stats;
    try {
      info = lstatSync(f);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw stateFileOpenRefusal(f, err, role) ?? err;
    }
    if (info.isSymbolicLink()) throw symlinkRefusal(f, role);
    if (f === file && info.isDirectory()) throw new StateFileError(f, `is a directory, not ${role.kind}; ${role.ifDirectory}`);
    if (!info.isFile()) continue;
    if ((info.mode & 0o777) !== STATE_FILE_MODE) {
      try {
        chmodSync(f, STATE_FILE_MODE);
      } catch (err) {
        // Another user's file: only its owner (or root) may chmod it.
        if (isAccessError(err)) throw accessRefusal(f, info, err, true) ?? err;
        throw err;
      }
      info = statSync(f);
    }
    const refusal = accessRefusal(f, info, undefined);
    if (refusal !== undefined) throw refusal;
  }
}

/** The open connection; closed again (and the error thrown) if any step fails. */
export function openStateDatabase(file: string, opts: StateDatabaseOptions): Database.Database {
  const role = opts.role ?? SQLITE_STATE_FILE;
  prepareStateFiles(file, role);
  let db: Database.Database;
  try {
    db = new Database(file);
  } catch (err) {
    throw stateFileOpenRefusal(file, err, role) ?? err;
  }
  try {
    // A file SQLite has just created has the umask's mode.
    chmodSync(file, STATE_FILE_MODE);
    db.pragma(`busy_timeout = ${opts.busyTimeoutMs}`);
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${opts.synchronous}`);
    db.exec(opts.schema);
  } catch (err) {
    db.close();
    throw stateFileOpenRefusal(file, err, role) ?? err;
  }
  return db;
}

/** SQLite's quick_check rows (the first three) as one line: a row may hold several lines ("*** in database main ***"). */
export function quickCheckLine(problems: readonly string[]): string {
  return problems
    .slice(0, 3)
    .map((p) => p.trim().replace(/\s*\n\s*/g, '; '))
    .join('; ');
}
