/**
 * spool.db: finding, vetting and creating the node's SQLite spool file. A spool that is not
 * plainly ours and healthy is never replaced, repaired or deleted: opening is refused with a
 * SpoolRefusedError that names the file and what to do, because the rows in it may be the only
 * copy of records the control plane has not acknowledged.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { accessSync, chmodSync, closeSync, constants, existsSync, fchmodSync, fchownSync, fstatSync, fsyncSync, linkSync, lstatSync, openSync, readdirSync, readSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { STATE_FILE_MODE, StateFileError } from '../state/state-store.js';
import { LOCK_FILE_ROLE, quickCheckLine, refuseSymlinkedStateFiles } from '../state/state-database.js';
import type { StateFileRole } from '../state/state-database.js';
import { isSpoolHeldOpen, isSpoolLockFileName } from './spool-owner-lock.js';
import { fileAloneSummary, foreignWalProblem } from './wal-belongs-check.js';
import { findWalDamage, findWalShortfall } from './wal-file-check.js';

export const SPOOL_FILE = 'spool.db';
/** Bumped when the tables change incompatibly; a newer spool is refused, never downgraded. */
export const SPOOL_FORMAT_VERSION = 1;

const SQLITE_MAGIC = Buffer.from('SQLite format 3\0', 'latin1');

export interface SpoolMeta {
  nodeId: string;
  spoolId: string;
  formatVersion: number;
  createdAt: string;
}

/**
 * The spool file cannot be used as it is; the message names the file and what to do. A
 * StateFileError, so `zenova-node serve` prints it as one line and exits non-zero.
 */
export class SpoolRefusedError extends StateFileError {
  constructor(file: string, problem: string, advice: string, options?: { cause?: unknown }) {
    super(file, `${problem}; ${advice}`, options);
    this.name = 'SpoolRefusedError';
  }
}

const KEEP_ADVICE =
  'the file was left untouched because it may hold records the control plane has not received. ' +
  'Move it aside together with its -wal and -shm files (keep a copy for support) and start again, or restore a good copy';

const FOREIGN_WAL_ADVICE =
  'spool.db and its -wal were left untouched (byte for byte): opening them would replace this spool\'s records, which the control plane may not have received, ' +
  'with what the WAL makes of them (another spool\'s records, or an older or cut-short state of this one) and delete the WAL. ' +
  'Move spool.db-wal (and spool.db-shm) aside, never spool.db, and keep them (with the spool they came from, or for support); start again to open spool.db with its own records';

/** What to do about committed transactions a missing or cut-short WAL lost (findSpoolWalShortfall). */
export const WAL_SHORTFALL_ADVICE =
  'if spool.db-wal was moved or copied away, stop and put it back beside spool.db before node-edge starts (it still holds them); ' +
  'otherwise the loss stands: keep a copy of spool.db, spool.db-wal and spool.db-shm for support. `serve` starts with this spool and logs this warning ' +
  '(its first connection rebuilds the -shm, which is the only trace: `status` and `doctor` do not open the spool while the -shm shows it); ' +
  'to accept the loss without starting, move spool.db-shm aside (keep it)';

/** spool.db as the state-file refusals name it (state-database.ts); its other refusals are SpoolRefusedErrors. */
const SPOOL_FILE_ROLE: StateFileRole = {
  kind: 'a spool file',
  ifDirectory: 'it was left untouched: move it aside, and put the spool file back at this path (with its -wal and -shm) if you have it',
  ifSymlink:
    "if it leads to this node's own spool (put back by hand), move that file here in place of the link (spool.db together with its -wal and -shm); " +
    'otherwise remove the link and put spool.db itself back: records are only ever delivered from the spool file in the state dir',
};

/**
 * Refuses, before anything stats or opens them, a symbolic link at spool.db, its -wal or -shm, or a
 * lock file beside it (`spool.db.lock`, the owner slots, the sole-process lock): each check and
 * connection would follow it, and a lock file's truncation or chmod would reach its target.
 */
export function refuseSymlinkedSpoolFiles(file: string): void {
  refuseSymlinkedStateFiles(file, SPOOL_FILE_ROLE);
  const dir = path.dirname(file);
  for (const entry of readdirSync(dir)) {
    if (entry === `${path.basename(file)}.lock` || isSpoolLockFileName(entry)) refuseSymlinkedStateFiles(path.join(dir, entry), LOCK_FILE_ROLE);
  }
}

/** A file of the spool this process was denied, with its owner and mode (lstat for a sidecar). */
export interface DeniedSpoolFile {
  file: string;
  uid: number;
  mode: number;
}

const isAccessError = (err: unknown): boolean => ['EACCES', 'EPERM'].includes((err as NodeJS.ErrnoException).code ?? '');

/**
 * Which of spool.db and its existing sidecars this process may not read (`status`), or read and
 * write (`serve`). A sidecar that is not a regular file is skipped, as restrictSpoolFileModes does.
 */
export function deniedSpoolFiles(file: string, access: 'read' | 'read-write'): DeniedSpoolFile[] {
  const mode = access === 'read' ? constants.R_OK : constants.R_OK | constants.W_OK;
  const denied: DeniedSpoolFile[] = [];
  for (const f of [file, `${file}-wal`, `${file}-shm`]) {
    let info;
    try {
      info = f === file ? statSync(f) : lstatSync(f);
    } catch {
      continue; // absent; anything stranger is met by the steps that follow, with their own messages
    }
    if (!info.isFile()) continue;
    try {
      accessSync(f, mode);
    } catch (err) {
      if (isAccessError(err)) denied.push({ file: f, uid: info.uid, mode: info.mode & 0o777 });
    }
  }
  return denied;
}

/**
 * The refusal for spool files node-edge may not use: usually left root's by a command run with sudo
 * (a node-edge started as root once, a sqlite3 session), in a state dir of the node's user.
 */
export function spoolAccessRefusal(denied: readonly DeniedSpoolFile[], cause?: unknown): SpoolRefusedError {
  const [first] = denied;
  if (first === undefined) throw new Error('spoolAccessRefusal needs a denied file');
  const me = process.getuid?.() ?? -1;
  const options = cause === undefined ? undefined : { cause };
  if (first.uid === me) {
    return new SpoolRefusedError(first.file, `permission denied: its mode ${first.mode.toString(8).padStart(3, '0')} does not let its owner (this user) read and write it`, `chmod 600 ${first.file}`, options);
  }
  const others = denied.filter((d) => d.uid !== me).map((d) => d.file);
  return new SpoolRefusedError(
    first.file,
    `permission denied: it belongs to uid ${first.uid}, and node-edge runs as uid ${me}`,
    `run node-edge as uid ${first.uid} if that is the node's user; else give the file to the node's user (a command run as root may have left it): chown ${me} ${others.join(' ')}`,
    options,
  );
}

/**
 * Refuses spool files of another owner that this process may not read and write; its own files
 * it may always chmod, and serve makes them 0600 itself (restrictSpoolFileModes). Checked before
 * any connection, whose failure would say only "unable to open database file".
 */
export function checkSpoolFileAccess(file: string): void {
  const me = process.getuid?.();
  const denied = deniedSpoolFiles(file, 'read-write').filter((d) => d.uid !== me);
  if (denied.length > 0) throw spoolAccessRefusal(denied);
}

/** The refusal for an access error met on `file`, with its owner as stat tells it. */
function accessRefusalFor(file: string, err: unknown): SpoolRefusedError {
  const info = statSync(file);
  return spoolAccessRefusal([{ file, uid: info.uid, mode: info.mode & 0o777 }], err);
}

const SCHEMA = `
  create table meta (key text primary key, value text not null) without rowid;
  -- Requests accepted but not finished; finalised as 'interrupted' after a crash.
  create table open_requests (request_id text primary key, row_json text not null) without rowid;
  -- Final records awaiting the control plane's ack. AUTOINCREMENT: a sequence is never reused,
  -- even after every row was deleted, so a stale ack can never name a newer row.
  create table records (
    sequence    integer primary key autoincrement,
    request_id  text not null unique,
    record_json text not null
  );
`;

function readHeader(file: string): Buffer {
  const fd = openSync(file, 'r');
  try {
    const header = Buffer.alloc(100);
    const read = readSync(fd, header, 0, 100, 0);
    return header.subarray(0, read);
  } catch (err) {
    // open() takes a directory; reading it is what fails. Named, not an unexpected failure.
    if ((err as NodeJS.ErrnoException).code === 'EISDIR') {
      throw new SpoolRefusedError(
        file,
        'is a directory, not a spool file',
        'it was left untouched: move it aside, and put the spool file back at this path (with its -wal and -shm) if you have it',
        { cause: err },
      );
    }
    throw err;
  } finally {
    closeSync(fd);
  }
}

/** The records table's AUTOINCREMENT high-water mark (0 before the first record): never lowered in a live file. */
export const RECORD_SEQUENCE_QUERY = "select coalesce((select seq from sqlite_sequence where name = 'records'), 0)";

/** The spool's record sequence mark (RECORD_SEQUENCE_QUERY), read without writing (after vetSpoolFile). */
export function spoolRecordSequence(file: string): number {
  return withReadOnlySpool(file, (db) => Number(db.prepare(RECORD_SEQUENCE_QUERY).pluck().get()));
}

function readMeta(db: Database.Database): Partial<Record<string, string>> {
  const rows = db.prepare('select key, value from meta').all() as Array<{ key: string; value: string }>;
  return Object.fromEntries(rows.map((r) => [r.key, r.value]));
}

/**
 * Runs `fn` on a read-only connection, which never checkpoints or rolls back anything. Such a
 * connection to a WAL database creates -shm (and an empty -wal) beside it when they are missing,
 * and they are left there: a node-edge that started meanwhile (a restart while `status` runs) has
 * opened those very files, and unlinking them would make its writer append to a WAL that no later
 * open ever reads (every record since lost at the next crash). No reader can tell whether a writer
 * holds them, so none deletes them; an empty -wal and a -shm are what node-edge itself leaves
 * after a kill and recovers from at its next open.
 *
 * The files must stay usable by node-edge when the reader is root (`sudo zenova status`) and the
 * node another user: SQLite creates them with spool.db's mode and, as root, fchowns them to
 * spool.db's owner right after opening them. ensureSidecarOwnership checks that and corrects it.
 */
export function withReadOnlySpool<T>(file: string, fn: (db: Database.Database) => T): T {
  const missing = [`${file}-wal`, `${file}-shm`].filter((f) => !existsSync(f));
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    if (missing.length > 0) {
      // The first read opens the WAL and -shm (creating them), so their ownership is settled
      // before `fn` runs, however long it takes.
      db.prepare('select count(*) from sqlite_master').get();
      ensureSidecarOwnership(file, missing);
    }
    return fn(db);
  } finally {
    db.close();
  }
}

/**
 * The spool's live bytes: the database's pages in use (free pages excluded: delivered records'
 * pages are reused) plus the WAL file. The quota is judged by it (spool-store.ts), and `status`
 * shows it (spool-figures.ts), so both say the same figure.
 */
export function spoolLiveBytes(db: Database.Database, file: string): number {
  const pages = Number(db.pragma('page_count', { simple: true })) - Number(db.pragma('freelist_count', { simple: true }));
  return pages * Number(db.pragma('page_size', { simple: true })) + spoolWalBytes(file);
}

/** The WAL file's size; 0 when there is none (just checkpointed and removed). */
export function spoolWalBytes(file: string): number {
  try {
    return statSync(`${file}-wal`).size;
  } catch {
    return 0;
  }
}

/**
 * Gives the sidecars this process may have created the owner, group and permission bits of
 * `file`, so a node-edge running as spool.db's owner can open them. Only when running as root
 * (nobody else can chown, or create files another user could not open through spool.db's own
 * permissions). The files are never removed or replaced.
 */
function ensureSidecarOwnership(file: string, sidecars: readonly string[]): void {
  if (process.geteuid?.() !== 0) return;
  const main = statSync(file);
  for (const sidecar of sidecars) {
    let fd: number;
    try {
      // O_NOFOLLOW: a symlink planted in the state dir must not turn this into a chown of its target.
      fd = openSync(sidecar, constants.O_RDONLY | constants.O_NOFOLLOW);
    } catch {
      continue; // not created (a database not in WAL mode, or the open failed)
    }
    try {
      const st = fstatSync(fd);
      if (st.uid !== main.uid || st.gid !== main.gid) fchownSync(fd, main.uid, main.gid);
      if ((st.mode & 0o777) !== (main.mode & 0o777)) fchmodSync(fd, main.mode & 0o777);
    } finally {
      closeSync(fd);
    }
  }
}

/**
 * What is wrong with `file`'s WAL (wal-file-check.ts), or null. Damage SQLite's recovery would hide
 * is left by a crash with no writer running: while a live process holds the spool open (an owner
 * slot, spool-owner-lock.ts: another replica), its connection has recovered the WAL already (it
 * was walked before that replica opened it), and its writes and checkpoints would only show a walk
 * frames of two generations.
 */
export function findSpoolWalDamage(file: string): string | null {
  if (isSpoolHeldOpen(file)) return null;
  return findWalDamage(`${file}-wal`);
}

/**
 * Committed transactions lost with `file`'s WAL (missing, cut short, or replaced, while the -shm a
 * killed node-edge left still counts them: wal-file-check.ts, findWalShortfall), or null. Must run
 * before any connection of this process opens the spool (SQLite's first connection rebuilds the
 * -shm from the WAL it finds). Not looked for while a live process holds the spool open: its
 * connection keeps the -shm.
 */
export function findSpoolWalShortfall(file: string): string | null {
  if (isSpoolHeldOpen(file)) return null;
  return findWalShortfall(`${file}-wal`, `${file}-shm`);
}

/**
 * Checks an existing spool file and its WAL without writing to them (the WAL is walked before a
 * read-only connection, which never checkpoints or rolls back anything, opens it), and returns its meta. `expectedNodeId`: the node this state dir is
 * enrolled as; a spool of another node is foreign. `onWarning` hears of committed transactions a
 * missing or cut-short WAL lost (findSpoolWalShortfall): not a refusal, the records are gone either
 * way and spool.db itself is sound, but the trace is gone once a connection opened the spool.
 */
export function vetSpoolFile(file: string, expectedNodeId: string, onWarning?: (warning: string) => void): SpoolMeta {
  const size = statSync(file).size;
  if (size === 0) throw new SpoolRefusedError(file, 'is empty (0 bytes), which no spool this node created ever is', KEEP_ADVICE);
  let header: Buffer;
  try {
    header = readHeader(file);
  } catch (err) {
    if (isAccessError(err)) throw accessRefusalFor(file, err);
    throw err;
  }
  if (header.length < 100 || !header.subarray(0, 16).equals(SQLITE_MAGIC)) {
    throw new SpoolRefusedError(file, 'is not a SQLite database (garbage or a truncated header)', KEEP_ADVICE);
  }
  // SQLite writes whole pages: a file cut inside its last page reads the missing tail as zeros, which
  // quick_check may pass, and the damaged rows would be sent and set aside unbilled.
  const pageSize = header.readUInt16BE(16) === 1 ? 65_536 : header.readUInt16BE(16);
  if (pageSize >= 512 && size % pageSize !== 0) {
    throw new SpoolRefusedError(file, `is cut short: ${size} bytes is not a whole number of its ${pageSize}-byte pages`, KEEP_ADVICE);
  }
  // Before any connection: SQLite's recovery would drop the frames from a damaged one on, and
  // quick_check would then pass the shorter database.
  const walDamage = findSpoolWalDamage(file);
  if (walDamage !== null) throw new SpoolRefusedError(file, walDamage, KEEP_ADVICE);
  // Before any connection, whose recovery rebuilds the -shm that is the only trace of the loss.
  const shortfall = findSpoolWalShortfall(file);
  if (shortfall !== null) onWarning?.(`${file} ${shortfall}; ${WAL_SHORTFALL_ADVICE}`);
  // The file without its WAL, read before any connection of this process opens it (wal-belongs-check.ts).
  const alone = isSpoolHeldOpen(file) ? null : fileAloneSummary(file);
  let meta: Partial<Record<string, string>>;
  try {
    meta = withReadOnlySpool(file, (db) => {
      const check = db.pragma('quick_check', { simple: false }) as Array<{ quick_check: string }>;
      const problems = check.map((r) => r.quick_check).filter((r) => r !== 'ok');
      if (problems.length > 0) throw new SpoolRefusedError(file, `is corrupt (quick_check: ${quickCheckLine(problems)})`, KEEP_ADVICE);
      const read = readMeta(db);
      // Before the read-write open, whose first checkpoint would make another spool's WAL this file's and delete it.
      if (read.node_id !== undefined && read.spool_id !== undefined) {
        const foreign = foreignWalProblem(file, alone, db, read.node_id);
        if (foreign !== null) throw new SpoolRefusedError(file, foreign, FOREIGN_WAL_ADVICE);
      }
      return read;
    });
  } catch (err) {
    if (err instanceof SpoolRefusedError) throw err;
    // SQLite says only "unable to open database file" when a sidecar is another user's.
    const denied = deniedSpoolFiles(file, 'read');
    if (denied.length > 0) throw spoolAccessRefusal(denied, err);
    throw new SpoolRefusedError(file, `cannot be read as a spool (${(err as Error).message})`, KEEP_ADVICE, { cause: err });
  }
  const formatVersion = Number(meta.format_version);
  if (meta.node_id === undefined || meta.spool_id === undefined || !Number.isInteger(formatVersion)) {
    throw new SpoolRefusedError(file, 'is a SQLite database but not a Zenova spool (no spool meta)', KEEP_ADVICE);
  }
  if (formatVersion > SPOOL_FORMAT_VERSION) {
    throw new SpoolRefusedError(
      file,
      `was written by a newer node (spool format ${formatVersion}, this node reads ${SPOOL_FORMAT_VERSION})`,
      'run the node version that wrote it until its backlog is delivered (zenova-node status shows it), or upgrade this node',
    );
  }
  if (meta.node_id !== expectedNodeId) {
    throw new SpoolRefusedError(
      file,
      `belongs to node ${meta.node_id}, but this state dir is enrolled as node ${expectedNodeId}`,
      `its records can only be delivered by node ${meta.node_id}. ` +
        'Re-enrolling the same node (--reenroll) keeps its node id and its spool; a spool of another node is never adopted. ' +
        'Move the file aside with its -wal and -shm files (keep them for support) to start this node with a new spool',
    );
  }
  return { nodeId: meta.node_id, spoolId: meta.spool_id, formatVersion, createdAt: meta.created_at ?? '' };
}

/**
 * Makes spool.db and its existing -wal/-shm owner-only (0600): a spool written by an older release
 * has them at the umask's 0644. Called before any connection opens it, so sidecars SQLite creates
 * afterwards take spool.db's corrected mode. A sidecar that is not a regular file (a symlink
 * planted beside it) is left alone, so no chmod reaches its target.
 */
export function restrictSpoolFileModes(file: string): void {
  for (const f of [file, `${file}-wal`, `${file}-shm`]) {
    let mode: number;
    try {
      const info = f === file ? statSync(f) : lstatSync(f);
      if (!info.isFile()) continue;
      mode = info.mode & 0o777;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw err;
    }
    if (mode === STATE_FILE_MODE) continue;
    try {
      // chmod by path, never through a descriptor: closing one would drop this process's SQLite locks on the file.
      chmodSync(f, STATE_FILE_MODE);
    } catch (err) {
      // Another user's file (root's, left by a command run with sudo): only its owner may chmod it.
      if (isAccessError(err)) throw accessRefusalFor(f, err);
      throw err;
    }
  }
}

/** createSpoolFile found spool.db there already (another process made it first): vet that one instead. */
export class SpoolFileExistsError extends Error {
  constructor(file: string) {
    super(`${file} already exists`);
    this.name = 'SpoolFileExistsError';
  }
}

/**
 * Where a new spool is built before it is published: `spool.db.new-<12 hex>`, random rather than the
 * pid, which is 1 in every container (the installer accepts these names in data/: install-dir-contents.ts).
 */
export function newSpoolTempFile(file: string): string {
  return `${file}.new-${randomBytes(6).toString('hex')}`;
}

/**
 * The non-empty -wal (and its -shm) of a spool.db that is gone (a node killed -9, then the file lost or
 * moved aside without them). SQLite would replay that WAL into a new spool.db of the same name:
 * the lost spool's records (and its meta pages) would appear in it.
 */
export function leftoverSpoolSidecars(file: string): string[] {
  const nonEmpty = (f: string): boolean => {
    try {
      return lstatSync(f).size > 0;
    } catch {
      return false;
    }
  };
  // Only a WAL with frames can be replayed; a -shm alone (the WAL truncated by a checkpoint before
  // the kill) is rebuilt by the first connection, harmless. It is named with the WAL it belongs to.
  if (!nonEmpty(`${file}-wal`)) return [];
  return [`${file}-wal`, ...(nonEmpty(`${file}-shm`) ? [`${file}-shm`] : [])];
}

/** No new spool while a lost one's WAL would be replayed into it. */
export function leftoverSidecarsRefusal(file: string, leftovers: readonly string[]): SpoolRefusedError {
  const names = leftovers.map((f) => path.basename(f)).join(' and ');
  return new SpoolRefusedError(
    file,
    `is missing, but ${leftovers.join(' and ')} of an earlier spool ${leftovers.length === 1 ? 'is' : 'are'} still beside it; ` +
      "a new spool at this path would take them over (SQLite replays a WAL into the database of its name), and the lost spool's records would appear in it",
    `the files were left untouched: put spool.db back beside them, or, if it is lost for good, move ${names} aside too (keep them with the rest of that spool) and start again`,
  );
}

/**
 * Creates a new empty spool for `nodeId` atomically: built under a temporary name, fsynced and
 * published with link(), so `spool.db` is either absent or a complete spool with its meta. link()
 * never replaces an existing file (a rename would: a spool another replica already has open, whose
 * records would then be lost); SpoolFileExistsError says spool.db was there first.
 */
export function createSpoolFile(file: string, nodeId: string): SpoolMeta {
  // Looked for before spool.db: sidecars seen while spool.db is then still absent are a lost
  // spool's, never those of a spool another process has just published (linked before its WAL).
  const leftovers = leftoverSpoolSidecars(file);
  if (existsSync(file)) throw new SpoolFileExistsError(file);
  if (leftovers.length > 0) throw leftoverSidecarsRefusal(file, leftovers);
  const meta: SpoolMeta = { nodeId, spoolId: randomUUID(), formatVersion: SPOOL_FORMAT_VERSION, createdAt: new Date().toISOString() };
  const temp = newSpoolTempFile(file);
  // Owner-only like every state file: it holds prompts and answers, and the state dir may be
  // readable by others (an existing dir, a container volume). SQLite would create it with the
  // umask (0644); it builds a database in the empty file instead, and its -wal/-shm take its mode.
  closeSync(openSync(temp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, STATE_FILE_MODE));
  try {
    chmodSync(temp, STATE_FILE_MODE);
    const db = new Database(temp);
    try {
      // Built in rollback-journal mode so the temporary file is one self-contained file to publish.
      db.pragma('journal_mode = DELETE');
      db.pragma('synchronous = FULL');
      db.exec(SCHEMA);
      const insert = db.prepare('insert into meta (key, value) values (?, ?)');
      db.transaction(() => {
        insert.run('format_version', String(meta.formatVersion));
        insert.run('node_id', meta.nodeId);
        insert.run('spool_id', meta.spoolId);
        insert.run('created_at', meta.createdAt);
      })();
    } finally {
      db.close();
    }
    try {
      linkSync(temp, file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw new SpoolFileExistsError(file);
      throw err;
    }
  } finally {
    rmSync(temp, { force: true });
  }
  const dirFd = openSync(path.dirname(file), 'r');
  try {
    fsyncSync(dirFd);
  } finally {
    closeSync(dirFd);
  }
  return meta;
}
