/**
 * Whether spool.db-wal belongs to the spool.db under it. SQLite replays any WAL it finds beside a
 * database, whosever it is: a WAL of another spool (another node's, or another spool of this node)
 * put beside spool.db passes every check of the WAL alone (wal-file-check.ts) and quick_check, the
 * spool's own records (answers already sent) vanish behind the other spool's, and the first
 * checkpoint deletes the WAL. So, before any read-write open, the database file alone is compared
 * with the view through the WAL, by indexed lookups only (a spool may be 1 GiB).
 */
import { randomBytes } from 'node:crypto';
import { linkSync, mkdirSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';

/** A WAL's 32-byte header: no frames after it, nothing to replay. */
const WAL_HEADER_BYTES = 32;

/** Whether the WAL at `wal` has frames after its header (else there is nothing to replay). */
function hasFrames(wal: string): boolean {
  try {
    return statSync(wal).size > WAL_HEADER_BYTES;
  } catch {
    return false;
  }
}

/** What one side (the file alone, or the view through the WAL) says about the spool. */
interface SpoolSide {
  nodeId: string | undefined;
  spoolId: string | undefined;
  /** sqlite_sequence's mark for records (0 before the first). */
  sequenceMark: number;
  /** Lowest and highest record sequence held, or null when no record is. */
  lowest: number | null;
  highest: number | null;
}

function readSide(db: Database.Database): SpoolSide {
  const meta = (key: string): string | undefined => db.prepare('select value from meta where key = ?').pluck().get(key) as string | undefined;
  const range = db.prepare('select min(sequence) as lowest, max(sequence) as highest from records').get() as { lowest: number | null; highest: number | null };
  return {
    nodeId: meta('node_id'),
    spoolId: meta('spool_id'),
    sequenceMark: Number(db.prepare("select coalesce((select seq from sqlite_sequence where name = 'records'), 0)").pluck().get()),
    lowest: range.lowest,
    highest: range.highest,
  };
}

const requestIdAt = (db: Database.Database, sequence: number): string | undefined =>
  db.prepare('select request_id from records where sequence = ?').pluck().get(sequence) as string | undefined;

/**
 * Runs `fn` on a read-only connection to `file` as it is on disk without its WAL: a hard link to it
 * in a private (0700) directory beside it (same filesystem; link() copies nothing), where no -wal
 * is. The better-sqlite3 build takes no URI filenames, so `immutable=1` is not available. The
 * directory is named like a spool being created (`spool.db.new-<12 hex>`), which the installer
 * accepts in the state dir should a crash leave it, and is removed with what SQLite made in it.
 */
function withFileAlone<T>(file: string, fn: (db: Database.Database) => T): T {
  const dir = `${file}.new-${randomBytes(6).toString('hex')}`;
  mkdirSync(dir, { mode: 0o700 });
  try {
    const alone = path.join(dir, path.basename(file));
    linkSync(file, alone);
    const db = new Database(alone, { readonly: true, fileMustExist: true });
    try {
      return fn(db);
    } finally {
      db.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** What the file alone says (fileAloneSummary), to be compared with the view through the WAL. */
export interface FileAloneSummary extends SpoolSide {
  /** Records the file holds, by sequence: its lowest, its highest and some spread between them. */
  probes: Array<{ sequence: number; requestId: string }>;
}

/** Records sampled between the file's lowest and highest, each one indexed lookup. */
const PROBES = 16;

/**
 * What `file` alone holds, or null when its WAL has no frames (nothing to compare) or the file alone
 * cannot be read (a crash in the middle of a checkpoint leaves it half written, and its WAL is what
 * completes it). Must run while no connection of this process has the spool open: SQLite keeps one
 * wal-index per inode, and the link would share it and see the WAL.
 */
export function fileAloneSummary(file: string): FileAloneSummary | null {
  if (!hasFrames(`${file}-wal`)) return null;
  try {
    return withFileAlone(file, (alone) => {
      const side = readSide(alone);
      return { ...side, probes: sampleRecords(alone, side) };
    });
  } catch {
    return null;
  }
}

/**
 * Why `file`'s WAL is not its own (the problem, naming the WAL), or null. `alone` is what the file
 * holds without it (fileAloneSummary; null: it could not be read, and only the view's records'
 * node is checked), `view` a read-only
 * connection through the WAL, `nodeId` the spool meta's node. Legitimate WALs pass because a record
 * sequence is never reused (AUTOINCREMENT), a record is never changed, and records only leave by
 * delivery: a sequence both hold names the same request, and the WAL's mark is not below the file's.
 * Run only while no process holds the spool open (a live writer's checkpoints change the file).
 */
export function foreignWalProblem(file: string, alone: FileAloneSummary | null, view: Database.Database, nodeId: string): string | null {
  const wal = `${file}-wal`;
  if (!hasFrames(wal)) return null;
  const seen = readSide(view);
  const notOurs = `has a WAL (${wal}) that does not belong to it (a WAL of another spool, copied or left beside it)`;
  // The view's records are what backfill would deliver as this node's.
  for (const sequence of [seen.lowest, seen.highest]) {
    if (sequence === null) continue;
    const recordNode = view.prepare("select json_extract(record_json, '$.nodeId') from records where sequence = ?").pluck().get(sequence);
    if (recordNode !== nodeId) return `${notOurs}: through it, record ${sequence} is node ${String(recordNode)}'s, not this spool's node ${nodeId}`;
  }
  if (alone === null) return null;
  if (alone.nodeId !== seen.nodeId || alone.spoolId !== seen.spoolId) {
    return `${notOurs}: it turns spool ${String(alone.spoolId)} of node ${String(alone.nodeId)} into spool ${String(seen.spoolId)} of node ${String(seen.nodeId)}`;
  }
  if (seen.sequenceMark < alone.sequenceMark) {
    // spool.db has records the WAL's view lacks: this spool's own WAL cut short (its last frames
    // gone) or put back older than spool.db shows it as well as another spool's WAL does.
    return (
      `has a WAL (${wal}) that does not belong to it as it stands: through it the record sequence goes back from ${alone.sequenceMark} to ${seen.sequenceMark}, which this spool's never does; ` +
      'the WAL is cut short (truncated) or older than spool.db (an earlier copy put back), or it is another spool\'s (copied or left beside it)'
    );
  }
  for (const { sequence, requestId } of alone.probes) {
    const seenId = requestIdAt(view, sequence);
    if (seenId !== undefined && seenId !== requestId) {
      return `${notOurs}: record ${sequence} is request ${requestId} in spool.db but request ${seenId} through the WAL`;
    }
  }
  // The WAL holds only the pages its spool changed: laid over another file, its pages and the file's
  // mix, and the request-id index (the other spool's pages) no longer finds the records the table
  // holds, which quick_check does not compare.
  const byRequestId = view.prepare('select sequence from records where request_id = ?').pluck();
  for (const { sequence, requestId } of [...alone.probes, ...sampleRecords(view, seen)]) {
    if (requestIdAt(view, sequence) !== requestId) continue;
    const indexed = byRequestId.get(requestId) as number | undefined;
    if (indexed !== sequence) {
      return `${notOurs}: through it, record ${sequence} (request ${requestId}) is not where the request-id index says (${indexed === undefined ? 'not in it' : `record ${indexed}`})`;
    }
  }
  return null;
}

/** Records of `db` at its lowest and highest sequence and spread between (PROBES indexed lookups). */
function sampleRecords(db: Database.Database, side: SpoolSide): Array<{ sequence: number; requestId: string }> {
  const sample: Array<{ sequence: number; requestId: string }> = [];
  if (side.lowest === null || side.highest === null) return sample;
  const atOrAfter = db.prepare('select sequence, request_id as requestId from records where sequence >= ? order by sequence limit 1');
  const span = side.highest - side.lowest;
  for (let i = 0; i <= PROBES; i++) {
    const found = atOrAfter.get(side.lowest + Math.floor((span * i) / PROBES)) as { sequence: number; requestId: string } | undefined;
    if (found !== undefined && !sample.some((p) => p.sequence === found.sequence)) sample.push(found);
  }
  return sample;
}
