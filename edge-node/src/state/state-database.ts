/**
 * Opens (creating) a SQLite file in the node's state dir that the node's replicas may share:
 * owner-only like the rest of the state dir (the -wal/-shm files inherit the mode), WAL so readers
 * never wait for the one writer, a busy_timeout so writers queue for the lock instead of failing
 * (briefly: better-sqlite3 is synchronous, so a wait blocks the event loop), and its schema created
 * if missing. Each caller picks its durability (`synchronous`).
 */
import { chmodSync, lstatSync } from 'node:fs';
import Database from 'better-sqlite3';
import { STATE_FILE_MODE } from './state-store.js';

export interface StateDatabaseOptions {
  busyTimeoutMs: number;
  synchronous: 'OFF' | 'NORMAL' | 'FULL';
  /** Idempotent DDL (CREATE … IF NOT EXISTS), run on every open. */
  schema: string;
}

/**
 * Makes the -wal/-shm a crash left beside `file` owner-only before a connection opens them: files
 * an older release created at the umask's 0644 (credit-leases.sqlite) keep that mode otherwise. A
 * sidecar that is not a regular file (a symlink planted beside it) is left alone. By path, never
 * through a descriptor: closing one would drop this process's SQLite locks on the file.
 */
function restrictSidecarModes(file: string): void {
  for (const sidecar of [`${file}-wal`, `${file}-shm`]) {
    let info;
    try {
      info = lstatSync(sidecar);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw err;
    }
    if (info.isFile() && (info.mode & 0o777) !== STATE_FILE_MODE) chmodSync(sidecar, STATE_FILE_MODE);
  }
}

/** The open connection; closed again (and the error thrown) if any step fails. */
export function openStateDatabase(file: string, opts: StateDatabaseOptions): Database.Database {
  restrictSidecarModes(file);
  const db = new Database(file);
  try {
    chmodSync(file, STATE_FILE_MODE);
    db.pragma(`busy_timeout = ${opts.busyTimeoutMs}`);
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${opts.synchronous}`);
    db.exec(opts.schema);
  } catch (err) {
    db.close();
    throw err;
  }
  return db;
}
