// Shared set-up for the tests of a WAL lost, cut short or replaced after a kill -9 while the -shm
// still counts its frames (wal-file-check.ts, findWalShortfall): a killed node's spool.db, -wal and
// -shm as images to put back in any mix, and what status, doctor and serve say of them.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { Test } from 'tap';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { checkSpool } from '../../../edge-node/src/doctor/spool-check.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { readSpoolFigures } from '../../../edge-node/src/spool/spool-figures.js';
import { openStateStore } from '../../../edge-node/src/state/state-store.js';
import { formatNodeStatus, readNodeStatus } from '../../../edge-node/src/status/node-status.js';
import { NODE_ID, quietLogger, record, tempStateDir } from './spool-helpers.js';

export const SIDECARS = ['-wal', '-shm'] as const;
const sha = (file: string): string => createHash('sha256').update(readFileSync(file)).digest('hex');

/** A state dir with a spool node-edge created and closed (spool.json beside it). */
export async function newSpool(t: Test): Promise<string> {
  const dir = tempStateDir(t);
  await (await openNodeSpool({ stateDir: dir, nodeId: NODE_ID, holder: ConfigHolder.notReady('test'), logger: quietLogger(), synchronous: 'normal' })).close();
  return dir;
}

export type Image = Record<(typeof SIDECARS)[number], Buffer>;

/** Commits `count` records `<prefix><i>` on `db`, one transaction each (as node-edge's group commits do). */
export function commitRecords(db: Database.Database, prefix: string, count: number): void {
  const insert = db.prepare('insert into records (request_id, record_json) values (?, ?)');
  for (let i = 0; i < count; i++) insert.run(`${prefix}${i}`, JSON.stringify(record(`${prefix}${i}`)));
}

/**
 * Commits `count` records one transaction each on a connection to `dir`'s spool.db that never
 * checkpoints by itself, runs `before` first and `after` last on it, and returns the -wal and -shm
 * as they are then: what a node killed -9 at that moment leaves (the -shm is the connection's shared
 * memory, mapped from the file). The connection then closes, checkpointing and deleting both;
 * putImage puts them back.
 */
export function crashImage(dir: string, prefix: string, count: number, steps: { before?: (db: Database.Database) => void; after?: (db: Database.Database) => void } = {}): Image {
  const file = path.join(dir, 'spool.db');
  const db = new Database(file);
  try {
    db.pragma('wal_autocheckpoint = 0');
    steps.before?.(db);
    commitRecords(db, prefix, count);
    steps.after?.(db);
    return { '-wal': readFileSync(`${file}-wal`), '-shm': readFileSync(`${file}-shm`) };
  } finally {
    db.close();
  }
}

/** spool.db as `db` and its sidecars as `image` (a sidecar not in it absent): what the node left at the crash. */
export function putImage(dir: string, db: Buffer, image: Partial<Image>): void {
  const file = path.join(dir, 'spool.db');
  for (const s of SIDECARS) rmSync(`${file}${s}`, { force: true });
  writeFileSync(file, db);
  for (const s of SIDECARS) {
    const bytes = image[s];
    if (bytes !== undefined) writeFileSync(`${file}${s}`, bytes, { mode: 0o600 });
  }
}

export interface Killed {
  dir: string;
  file: string;
  /** spool.db as the killed node left it (nothing of `committed` copied into it yet). */
  db: Buffer;
  image: Image;
  committed: number;
}

/** A spool whose node was killed -9 with `committed` records in its WAL only (none copied into spool.db). */
export async function killedNode(t: Test, committed = 30): Promise<Killed> {
  const dir = await newSpool(t);
  const file = path.join(dir, 'spool.db');
  const db = readFileSync(file);
  const image = crashImage(dir, 'r', committed);
  putImage(dir, db, image);
  return { dir, file, db, image, committed };
}

export interface Seen {
  status: string;
  figures: ReturnType<typeof readSpoolFigures>;
  doctor: Awaited<ReturnType<typeof checkSpool>>;
  warnings: string[];
  backlog: number;
}

/** status, doctor and serve on `dir`: what each says, and whether the first two left spool.db and its sidecars as they were. */
export async function lookAt(t: Test, dir: string, untouched: boolean): Promise<Seen> {
  const file = path.join(dir, 'spool.db');
  const files = [file, ...SIDECARS.map((s) => `${file}${s}`)].filter((f) => existsSync(f));
  const before = files.map(sha);
  const store = await openStateStore(dir, { create: false });
  const figures = readSpoolFigures(dir);
  const status = formatNodeStatus({ ...(await readNodeStatus(store)), enrolled: true, node: { name: 'edge-1', id: NODE_ID, enrolledAt: '2026-01-01T00:00:00Z' } });
  const doctor = await checkSpool(store, NODE_ID);
  // Without a loss both open the spool read-only, whose connection rebuilds the -shm (as SQLite always does).
  if (untouched) t.same(files.map((f) => (existsSync(f) ? sha(f) : 'gone')), before, 'status and doctor left spool.db and its -wal and -shm as they were, the -shm that shows the loss too');
  const warnings: string[] = [];
  const logger = createLogger({
    level: 'debug',
    destination: {
      write: (line: string) => {
        const entry = JSON.parse(line) as { level: number; msg: string };
        if (entry.level >= 40) warnings.push(entry.msg);
      },
    },
  });
  const spool = await openNodeSpool({ stateDir: dir, nodeId: NODE_ID, holder: ConfigHolder.notReady('test'), logger, synchronous: 'normal' });
  const backlog = spool.figures().backfillBacklog;
  await spool.close();
  return { status, figures, doctor, warnings, backlog };
}

export async function expectNoAlarm(t: Test, dir: string, backlog: number): Promise<void> {
  const seen = await lookAt(t, dir, false);
  t.equal(seen.figures?.error, null, 'status reads the spool');
  t.equal(seen.figures?.backlog, backlog, 'status counts every record');
  t.notMatch(seen.status, /UNREADABLE|lost committed/, 'status shows no loss');
  t.equal(seen.doctor.ok, true, `doctor passes the spool (${seen.doctor.advice ?? ''})`);
  t.same(seen.warnings, [], 'serve logs no warning');
  t.equal(seen.backlog, backlog, 'serve starts with every record');
}

export async function expectLoss(t: Test, dir: string, what: RegExp, recovered: number | undefined, committed: number): Promise<void> {
  const file = path.join(dir, 'spool.db');
  const seen = await lookAt(t, dir, true);
  t.match(seen.figures?.error, what, 'status names the loss');
  t.match(seen.figures?.error, `${file}-shm`, 'status names the -shm that counts the lost frames');
  t.match(seen.status, /spool: {9}UNREADABLE: .*lost committed transactions/, 'status shows the spool UNREADABLE, not a smaller backlog');
  t.equal(seen.doctor.ok, false, 'doctor fails the spool');
  t.match(seen.doctor.advice, what, 'doctor names the loss');
  t.match(seen.doctor.advice, /put it back beside spool\.db before node-edge starts/, 'doctor says what to do');
  t.equal(seen.warnings.length, 1, 'serve logs one warning');
  t.match(seen.warnings[0], what, "serve's warning names the loss");
  if (recovered !== undefined) t.equal(seen.backlog, recovered, 'serve starts with what spool.db and the WAL still hold (the records are gone either way)');
  t.ok(seen.backlog < committed, `serve starts, and records were lost indeed (${seen.backlog} of ${committed} left)`);
  // serve's connection rebuilt the -shm: the trace is in serve's log only from now on.
  t.equal(readSpoolFigures(dir)?.error, null, 'after serve, status reads the spool again');
}
