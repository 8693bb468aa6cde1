/**
 * Opens rate-limits.sqlite for a SqliteLimitStore. The file holds nothing durable (counters of the
 * current minutes, leases, slots) and is the one state file written with synchronous=OFF, so an OS
 * crash may leave it damaged. A damaged file is moved aside (kept for support) and a new one made,
 * rather than the node failing to start on it.
 *
 * Replicas start at once on one file, so each opens it holding a lock (state/open-lock.ts on
 * `<file>.lock`, an empty file; the lock dies with its process): a replica that found the file
 * damaged could otherwise move aside the new file another replica made meanwhile and is serving
 * from, or a connection still open on the damaged file could delete the new file's -wal when it
 * closes (SQLite deletes the -wal by name). Under the lock the file at the path is the one checked,
 * and nobody else has it open unless it was found sound.
 */
import { renameSync } from 'node:fs';
import type Database from 'better-sqlite3';
import type { Logger } from '../logger.js';
import { underOpenLock } from '../state/open-lock.js';
import { openStateDatabase } from '../state/state-database.js';

/** SQLite's answers for a file that is not (or no longer) a sound database. */
const DAMAGED_CODES = new Set(['SQLITE_NOTADB', 'SQLITE_CORRUPT']);
/** What SQLite may keep beside the file. */
const SIDECAR_SUFFIXES = ['-wal', '-shm', '-journal'];

export interface RateLimitFileOptions {
  busyTimeoutMs: number;
  schema: string;
  /** Told when a damaged file was moved aside. */
  logger?: Logger;
}

/** The lock file beside `file` (the installer accepts it in data/: install-dir-contents.ts). */
export function rateLimitOpenLockFile(file: string): string {
  return `${file}.lock`;
}

/** Where a damaged `file` goes: `<file>.damaged-20261202T040516.123Z` (its sidecars keep their suffixes after it). */
export function damagedRateLimitFile(file: string, at: Date): string {
  return `${file}.damaged-${at.toISOString().replace(/[-:]/g, '')}`;
}

/** The open database; a damaged file is moved aside and a new one made. Throws when that fails too. */
export function openRateLimitDatabase(file: string, opts: RateLimitFileOptions): Database.Database {
  return underOpenLock(rateLimitOpenLockFile(file), () => {
    const first = openChecked(file, opts);
    if (!('damage' in first)) return first;
    const aside = damagedRateLimitFile(file, new Date());
    // Whatever sidecar is left (SQLite deletes a -wal it could not use when the check's connection
    // closes) goes with it, so the new file never starts from the damaged one's journal. Sidecars
    // first: a crash between the renames leaves the damaged file at the path, moved at the next start.
    for (const suffix of SIDECAR_SUFFIXES) renameIfPresent(`${file}${suffix}`, `${aside}${suffix}`);
    renameSync(file, aside);
    const fresh = openChecked(file, opts);
    if ('damage' in fresh) throw new Error(`${file} is damaged even after it was made anew (${fresh.damage})`);
    opts.logger?.warn(
      { file, movedTo: aside, damage: first.damage },
      `${file} was damaged (${first.damage}); moved aside to ${aside} and a new one made: it held only the counters of the current minutes, which start again from 0`,
    );
    return fresh;
  });
}

/** The open, checked database, or what is wrong with the file. Other failures are thrown. */
function openChecked(file: string, opts: RateLimitFileOptions): Database.Database | { damage: string } {
  let db: Database.Database | undefined;
  try {
    db = openStateDatabase(file, { busyTimeoutMs: opts.busyTimeoutMs, synchronous: 'OFF', schema: opts.schema });
    // The file is small: a damaged page is found here, not by the first admit (which would fail open for good).
    const problems = (db.pragma('quick_check', { simple: false }) as Array<{ quick_check: string }>).map((r) => r.quick_check).filter((r) => r !== 'ok');
    if (problems.length > 0) {
      db.close();
      return { damage: `quick_check: ${problems.slice(0, 3).join('; ')}` };
    }
    return db;
  } catch (err) {
    if (db?.open === true) db.close();
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string' && DAMAGED_CODES.has(code)) return { damage: `${code}: ${(err as Error).message}` };
    throw err;
  }
}

function renameIfPresent(from: string, to: string): void {
  try {
    renameSync(from, to);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}
