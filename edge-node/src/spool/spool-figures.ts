/**
 * The spool's figures as `zenova-node status` shows them, read from the file without the serving
 * process (read-only; safe while node-edge writes). Bytes are live bytes, as the quota and the
 * heartbeat count them (spoolLiveBytes); fileBytes the files' size on disk, which never shrinks.
 * A WAL that serve would refuse (damaged: wal-file-check.ts; not this spool.db's as it stands:
 * wal-belongs-check.ts) makes the figures unreadable, never short: they would count a view serve
 * refuses. So do committed transactions a missing or cut-short WAL lost (findWalShortfall): the
 * spool is then not opened at all, since SQLite's first connection rebuilds the -shm that is the
 * only trace, and `doctor` and `serve` must still see it. None of it is looked for while a live
 * process holds the spool open (its connection recovered the WAL when it started).
 */
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { deniedSpoolFiles, SPOOL_FILE, spoolLiveBytes, WAL_SHORTFALL_ADVICE, withReadOnlySpool } from './spool-file.js';
import type { DeniedSpoolFile } from './spool-file.js';
import { isSpoolHeldOpen } from './spool-owner-lock.js';
import { fileAloneSummary, foreignWalProblem } from './wal-belongs-check.js';
import { findWalDamage, findWalShortfall } from './wal-file-check.js';

export interface SpoolFigures {
  file: string;
  /** Live bytes (free pages excluded) + WAL: what the quota and the heartbeat count. */
  bytes: number;
  /** Size on disk: database + WAL. */
  fileBytes: number;
  /** Final records not yet acknowledged by the control plane; 0 when `error` is set (`status --json` gives null then). */
  backlog: number;
  /** Requests accepted and not finished (in flight, or left by a crash until the next start). */
  open: number;
  /** Why the figures could not be read (the file is damaged or foreign: see `serve`'s refusal). */
  error: string | null;
}

const sizeOf = (file: string): number => (existsSync(file) ? statSync(file).size : 0);

/** null when the state dir has no spool yet. */
export function readSpoolFigures(stateDir: string): SpoolFigures | null {
  const file = path.join(stateDir, SPOOL_FILE);
  if (!existsSync(file)) return null;
  const fileBytes = sizeOf(file) + sizeOf(`${file}-wal`);
  try {
    const unreadable = (problem: string): SpoolFigures => ({ file, bytes: fileBytes, fileBytes, backlog: 0, open: 0, error: `${file} ${problem}` });
    const held = isSpoolHeldOpen(file);
    // Counted from a damaged WAL, the figures would leave out the records SQLite drops (serve refuses such a spool).
    const walDamage = held ? null : findWalDamage(`${file}-wal`);
    if (walDamage !== null) return unreadable(walDamage);
    const shortfall = held ? null : findWalShortfall(`${file}-wal`, `${file}-shm`);
    if (shortfall !== null) return unreadable(`${shortfall}; ${WAL_SHORTFALL_ADVICE}`);
    // Read before this process's connection opens the spool (wal-belongs-check.ts).
    const alone = held ? null : fileAloneSummary(file);
    return withReadOnlySpool(file, (db) => {
      if (!held) {
        const nodeId = db.prepare("select value from meta where key = 'node_id'").pluck().get() as string | undefined;
        const foreign = nodeId === undefined ? null : foreignWalProblem(file, alone, db, nodeId);
        // serve and doctor refuse it (vetSpoolFile): the backlog through that WAL is not the spool's.
        if (foreign !== null) return unreadable(`${foreign}; serve refuses to start with it`);
      }
      return {
        file,
        bytes: spoolLiveBytes(db, file),
        fileBytes,
        backlog: Number(db.prepare('select count(*) from records').pluck().get()),
        open: Number(db.prepare('select count(*) from open_requests').pluck().get()),
        error: null,
      };
    });
  } catch (err) {
    // SQLite says only "unable to open database file" for a file of another user's this one may not read.
    const denied = deniedSpoolFiles(file, 'read')[0];
    const error = denied !== undefined ? permissionProblem(denied) : (err as Error).message;
    return { file, bytes: fileBytes, fileBytes, backlog: 0, open: 0, error };
  }
}

function permissionProblem(denied: DeniedSpoolFile): string {
  const me = process.getuid?.() ?? -1;
  if (denied.uid === me) return `${denied.file}: permission denied (its mode ${denied.mode.toString(8).padStart(3, '0')} does not let its owner read it): chmod 600 ${denied.file}`;
  return (
    `${denied.file}: permission denied (owned by uid ${denied.uid}), and this runs as uid ${me}: run this as that user or with sudo; ` +
    `if node-edge runs as uid ${me}, it cannot open the spool either: give the file to it (chown ${me} ${denied.file})`
  );
}
