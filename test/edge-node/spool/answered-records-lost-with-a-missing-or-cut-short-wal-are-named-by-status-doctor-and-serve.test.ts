// A node-edge killed -9 leaves committed transactions (records of answers already sent) only in
// spool.db-wal, and its -shm counting them. Deleting that WAL, or cutting it short, lost them without
// a word: SQLite's first connection rebuilt the -shm from what was left, status showed a smaller
// backlog, doctor said "readable" and serve started. Now status shows the spool UNREADABLE naming the
// loss, doctor fails naming it (neither opens the spool, so the -shm stays for the next look), and
// serve starts with the spool and logs the loss as a warning. No alarm for what a crash or a clean
// stop leaves: a killed node's files as they are, a clean close, frames all copied into spool.db, a
// -shm of an older WAL generation beside a WAL SQLite started again after a full checkpoint.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { checkSpool } from '../../../edge-node/src/doctor/spool-check.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { readSpoolFigures } from '../../../edge-node/src/spool/spool-figures.js';
import { openStateStore } from '../../../edge-node/src/state/state-store.js';
import { formatNodeStatus, readNodeStatus } from '../../../edge-node/src/status/node-status.js';
import { NODE_ID, quietLogger, record, tempStateDir } from './spool-helpers.js';

const SIDECARS = ['-wal', '-shm'] as const;
const sha = (file: string): string => createHash('sha256').update(readFileSync(file)).digest('hex');

/** A state dir with a spool node-edge created and closed (spool.json beside it). */
async function newSpool(t: Test): Promise<string> {
  const dir = tempStateDir(t);
  await (await openNodeSpool({ stateDir: dir, nodeId: NODE_ID, holder: ConfigHolder.notReady('test'), logger: quietLogger(), synchronous: 'normal' })).close();
  return dir;
}

type Image = Record<(typeof SIDECARS)[number], Buffer>;

/**
 * Commits `count` records one transaction each (as node-edge's group commits do) on a connection
 * that never checkpoints by itself, runs `before` first and `after` last on it, and returns the -wal
 * and -shm as they are then: what a node killed -9 at that moment leaves (the -shm is the
 * connection's shared memory, mapped from the file). The connection then closes, checkpointing and
 * deleting both; putImage puts them back.
 */
function crashImage(dir: string, prefix: string, count: number, steps: { before?: (db: Database.Database) => void; after?: (db: Database.Database) => void } = {}): Image {
  const file = path.join(dir, 'spool.db');
  const db = new Database(file);
  try {
    db.pragma('wal_autocheckpoint = 0');
    steps.before?.(db);
    const insert = db.prepare('insert into records (request_id, record_json) values (?, ?)');
    for (let i = 0; i < count; i++) insert.run(`${prefix}${i}`, JSON.stringify(record(`${prefix}${i}`)));
    steps.after?.(db);
    return { '-wal': readFileSync(`${file}-wal`), '-shm': readFileSync(`${file}-shm`) };
  } finally {
    db.close();
  }
}

/** spool.db as `db` and its sidecars as `image` (a sidecar not in it absent): what the node left at the crash. */
function putImage(dir: string, db: Buffer, image: Partial<Image>): void {
  const file = path.join(dir, 'spool.db');
  for (const s of SIDECARS) rmSync(`${file}${s}`, { force: true });
  writeFileSync(file, db);
  for (const s of SIDECARS) {
    const bytes = image[s];
    if (bytes !== undefined) writeFileSync(`${file}${s}`, bytes, { mode: 0o600 });
  }
}

interface Killed {
  dir: string;
  file: string;
  /** spool.db as the killed node left it (nothing of `committed` copied into it yet). */
  db: Buffer;
  image: Image;
  committed: number;
}

/** A spool whose node was killed -9 with `committed` records in its WAL only (none copied into spool.db). */
async function killedNode(t: Test, committed = 30): Promise<Killed> {
  const dir = await newSpool(t);
  const file = path.join(dir, 'spool.db');
  const db = readFileSync(file);
  const image = crashImage(dir, 'r', committed);
  putImage(dir, db, image);
  return { dir, file, db, image, committed };
}

/** status, doctor and serve on `dir`: what each says, and whether the first two left spool.db and its sidecars as they were. */
async function lookAt(t: Test, dir: string, untouched: boolean): Promise<{ status: string; figures: ReturnType<typeof readSpoolFigures>; doctor: Awaited<ReturnType<typeof checkSpool>>; warnings: string[]; backlog: number }> {
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

async function expectNoAlarm(t: Test, dir: string, backlog: number): Promise<void> {
  const seen = await lookAt(t, dir, false);
  t.equal(seen.figures?.error, null, 'status reads the spool');
  t.equal(seen.figures?.backlog, backlog, 'status counts every record');
  t.notMatch(seen.status, /UNREADABLE|lost committed/, 'status shows no loss');
  t.equal(seen.doctor.ok, true, `doctor passes the spool (${seen.doctor.advice ?? ''})`);
  t.same(seen.warnings, [], 'serve logs no warning');
  t.equal(seen.backlog, backlog, 'serve starts with every record');
}

async function expectLoss(t: Test, dir: string, what: RegExp, recovered: number | undefined, committed: number): Promise<void> {
  const file = path.join(dir, 'spool.db');
  const seen = await lookAt(t, dir, true);
  t.match(seen.figures?.error, what, 'status names the loss');
  t.match(seen.figures?.error, `${file}-shm`, 'status names the -shm that counts the lost frames');
  t.match(seen.status, /spool: {9}UNREADABLE: .*lost committed transactions/, 'status shows the spool UNREADABLE, not a smaller backlog');
  t.equal(seen.doctor.ok, false, 'doctor fails the spool');
  t.match(seen.doctor.advice, what, 'doctor names the loss');
  t.match(seen.doctor.advice, /put it back beside spool\.db before node-edge starts/, 'doctor says what to do');
  t.equal(seen.warnings.length, 1, 'serve logs one warning');
  t.match(seen.warnings[0], what, 'serve\'s warning names the loss');
  if (recovered !== undefined) t.equal(seen.backlog, recovered, 'serve starts with what spool.db and the WAL still hold (the records are gone either way)');
  t.ok(seen.backlog < committed, `serve starts, and records were lost indeed (${seen.backlog} of ${committed} left)`);
  // serve's connection rebuilt the -shm: the trace is in serve's log only from now on.
  t.equal(readSpoolFigures(dir)?.error, null, 'after serve, status reads the spool again');
}

t.test('a killed node-edge\'s spool as it left it raises no alarm', async (t) => {
  const node = await killedNode(t);
  await expectNoAlarm(t, node.dir, node.committed);
});

t.test('a spool closed cleanly (no -wal, no -shm) raises no alarm', async (t) => {
  const dir = await newSpool(t);
  crashImage(dir, 'r', 12);
  t.notOk(existsSync(path.join(dir, 'spool.db-wal')), 'no -wal after a clean close');
  await expectNoAlarm(t, dir, 12);
});

t.test('spool.db-wal deleted after a kill -9 is named as lost answered records by status, doctor and serve', async (t) => {
  const node = await killedNode(t);
  rmSync(`${node.file}-wal`);
  await expectLoss(t, node.dir, /lost committed transactions: its WAL \(.*spool\.db-wal\) is missing, but its -shm .* counts (\d+) committed WAL frames of which \1 /, 0, node.committed);
});

t.test('spool.db-wal cut short after a kill -9 is named as lost answered records by status, doctor and serve', async (t) => {
  const node = await killedNode(t);
  truncateSync(`${node.file}-wal`, Math.floor(statSync(`${node.file}-wal`).size / 2));
  await expectLoss(t, node.dir, /lost committed transactions: its WAL \(.*spool\.db-wal\) is cut short, holding \d+ whole frames, but its -shm .* counts \d+ committed WAL frames of which \d+ /, undefined, node.committed);
});

t.test('spool.db-wal put back before serve starts brings every record back, and no alarm stays', async (t) => {
  const node = await killedNode(t);
  const wal = readFileSync(`${node.file}-wal`);
  rmSync(`${node.file}-wal`);
  t.match(readSpoolFigures(node.dir)?.error, /is missing/, 'status names the loss while the WAL is away');
  writeFileSync(`${node.file}-wal`, wal, { mode: 0o600 });
  await expectNoAlarm(t, node.dir, node.committed);
});

t.test('a WAL whose frames were all copied into spool.db may go without an alarm: nothing is lost', async (t) => {
  const dir = await newSpool(t);
  const file = path.join(dir, 'spool.db');
  // A PASSIVE checkpoint copies every frame (nBackfill = mxFrame) and leaves the WAL as it is.
  const image = crashImage(dir, 'r', 20, { after: (db) => void db.pragma('wal_checkpoint(PASSIVE)') });
  const db = readFileSync(file); // the close copied the same frames: spool.db as that checkpoint left it
  putImage(dir, db, { '-shm': image['-shm'] });
  await expectNoAlarm(t, dir, 20);
});

t.test("a -shm of an older WAL generation beside a WAL SQLite started again after a full checkpoint raises no alarm; an older WAL in the -shm's place is a loss", async (t) => {
  const dir = await newSpool(t);
  const file = path.join(dir, 'spool.db');
  const db0 = readFileSync(file);
  let older: Image | undefined;
  // Generation 1: 10 records committed, none copied (the older -shm counts them); then a RESTART
  // checkpoint (every frame copied; the next commit starts the WAL again, salt-1 + 1) and 10 more.
  const newer = crashImage(dir, 'b', 10, {
    before: (db) => {
      const insert = db.prepare('insert into records (request_id, record_json) values (?, ?)');
      for (let i = 0; i < 10; i++) insert.run(`a${i}`, JSON.stringify(record(`a${i}`)));
      older = { '-wal': readFileSync(`${file}-wal`), '-shm': readFileSync(`${file}-shm`) };
      db.pragma('wal_checkpoint(RESTART)');
    },
  });
  if (older === undefined) throw new Error('no older image');
  t.equal(newer['-wal'].readUInt32BE(16), (older['-wal'].readUInt32BE(16) + 1) >>> 0, 'the WAL was started again: salt-1 one further on');
  putImage(dir, readFileSync(file), { '-wal': newer['-wal'], '-shm': older['-shm'] });
  await expectNoAlarm(t, dir, 20);
  // The older generation's WAL beside spool.db as it was before it, under the newer -shm: the newer frames are gone.
  putImage(dir, db0, { '-wal': older['-wal'], '-shm': newer['-shm'] });
  t.match(readSpoolFigures(dir)?.error, /lost committed transactions: its WAL \(.*\) is not the one its -shm was written with/, 'status names the loss');
});
