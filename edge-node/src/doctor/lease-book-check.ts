/**
 * doctor's look at the credit lease book (credit-leases.sqlite): the refusals `serve` stops with
 * when it opens the book (lease-store.ts, openLeaseDatabase: a symbolic link, a directory, a file or
 * -wal/-shm another user owns, a damaged WAL, a file SQLite cannot read or that fails quick_check),
 * each with serve's message, so a book serve would refuse to start with fails here too.
 *
 * Nothing in the state dir is written: the checks that need a connection run on a private copy of
 * the book and its -wal, because a connection to the book itself would create its -wal/-shm (root's
 * under sudo, which serve then refuses) and recover its WAL. A book a running node-edge holds open
 * (it holds a spool owner slot) is not read: that process opened it already, and a WAL walked under
 * live writes proves nothing.
 */
import { copyFileSync, lstatSync, mkdtempSync, rmSync } from 'node:fs';
import type { Stats } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { LEASE_DB_FILE } from '../billing/lease-store.js';
import { SPOOL_FILE } from '../spool/spool-file.js';
import { isSpoolHeldOpen } from '../spool/spool-owner-lock.js';
import { inspectWalDamage } from '../spool/wal-file-check.js';
import { quickCheckLine, refuseSymlinkedStateFiles, stateFileOpenRefusal } from '../state/state-database.js';
import { StateFileError } from '../state/state-store.js';
import type { StateStore } from '../state/state-store.js';
import type { DoctorCheck } from './doctor.js';
import { DAMAGED_ADVICE, DAMAGED_CODES, LEASE_BOOK_ROLE } from '../billing/lease-store.js';

const REFUSED = '`serve` refuses to start with it: ';

// serve's own refusal texts (lease-store.ts), so doctor's messages are the ones serve exits with.

function lstatOrUndefined(file: string): Stats | undefined {
  try {
    return lstatSync(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/**
 * serve's refusal of the book or a -wal/-shm beside it that another user owns: not being root, it
 * can neither chmod such a file to 0600 (prepareStateFiles) nor, at 0600, read and write it. Its
 * own files at another mode serve makes 0600 itself.
 */
function refuseForeignFiles(file: string): void {
  const me = process.getuid?.();
  if (me === undefined || me === 0) return;
  for (const f of [file, `${file}-wal`, `${file}-shm`]) {
    const info = lstatOrUndefined(f);
    if (info === undefined || !info.isFile() || info.uid === me) continue;
    const denied = Object.assign(new Error(`${f}: owned by uid ${info.uid}`), { code: 'EPERM' });
    const refusal = stateFileOpenRefusal(f, denied, LEASE_BOOK_ROLE);
    if (refusal !== undefined) throw refusal;
  }
}

/** Opens a copy of the book (and its -wal) as serve opens the book, and runs serve's quick_check on it. */
function vetCopy(file: string): void {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zenova-doctor-lease-book-'));
  try {
    const copy = path.join(dir, LEASE_DB_FILE);
    copyFileSync(file, copy);
    if (lstatOrUndefined(`${file}-wal`)?.isFile() === true) copyFileSync(`${file}-wal`, `${copy}-wal`);
    let db: Database.Database | undefined;
    try {
      db = new Database(copy, { fileMustExist: true });
      db.pragma('journal_mode = WAL');
      const check = db.pragma('quick_check', { simple: false }) as Array<{ quick_check: string }>;
      const problems = check.map((r) => r.quick_check).filter((r) => r !== 'ok');
      if (problems.length > 0) throw new StateFileError(file, `is corrupt (quick_check: ${quickCheckLine(problems)}); ${DAMAGED_ADVICE}`);
    } catch (err) {
      if (err instanceof StateFileError) throw err;
      const code = (err as { code?: unknown }).code;
      if (typeof code !== 'string' || !code.startsWith('SQLITE_')) throw err;
      if (DAMAGED_CODES.has(code)) throw new StateFileError(file, `is not a readable credit lease book (${(err as Error).message}); ${DAMAGED_ADVICE}`, { cause: err });
      throw new StateFileError(file, `cannot be opened (${code}: ${(err as Error).message})`, { cause: err });
    } finally {
      db?.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export function checkLeaseBook(store: StateStore): DoctorCheck {
  const file = path.join(store.dir, LEASE_DB_FILE);
  const label = `credit lease book ${file}`;
  try {
    if (isSpoolHeldOpen(path.join(store.dir, SPOOL_FILE))) return { ok: true, label: `${label} (open in the running node-edge)` };
    // In serve's order: the files' kinds and owners, then the WAL, then a connection.
    refuseSymlinkedStateFiles(file, LEASE_BOOK_ROLE);
    const info = lstatOrUndefined(file);
    if (info?.isDirectory() === true) throw new StateFileError(file, `is a directory, not ${LEASE_BOOK_ROLE.kind}; ${LEASE_BOOK_ROLE.ifDirectory}`);
    refuseForeignFiles(file);
    const damage = inspectWalDamage(`${file}-wal`);
    if (damage !== null) throw new StateFileError(file, `${damage.problem}; ${DAMAGED_ADVICE}`);
    if (info === undefined) return { ok: true, label: `credit lease book: none yet (node-edge creates ${LEASE_DB_FILE} at its first start)` };
    vetCopy(file);
    return { ok: true, label: `${label}: readable` };
  } catch (err) {
    if (err instanceof StateFileError) return { ok: false, label, advice: `${REFUSED}${err.message}` };
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EACCES' || code === 'EPERM') {
      // This user's own file at a mode that forbids reading it: serve makes it 0600 and starts.
      return { ok: false, label, advice: `doctor cannot read it (${code}); node-edge makes it 0600 at its start, or \`chmod 600 ${file}\`, then run doctor again` };
    }
    return { ok: false, label, advice: `cannot be checked (${(err as Error).message})` };
  }
}
