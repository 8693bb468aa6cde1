// A spool.db-wal of another spool (another node's, or another spool of this node) put beside the
// node's spool.db is refused by serve and by doctor, and both files are left byte-identical:
// SQLite replays any WAL beside a database, quick_check passed the mix, the spool's own records
// (answers already sent) were replaced or joined by the other spool's, and the first checkpoint
// deleted the WAL. The WALs a node leaves when it is killed are still accepted with every record.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { checkSpool } from '../../../edge-node/src/doctor/spool-check.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import type { NodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { SpoolRefusedError, vetSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { openStateStore } from '../../../edge-node/src/state/state-store.js';
import { NODE_ID, quietLogger, record, tempStateDir } from './spool-helpers.js';

const CHILD = fileURLToPath(new URL('./spool-wal-child.ts', import.meta.url));
const OTHER_NODE = 'node-other-0002';

const sha = (file: string): string => createHash('sha256').update(readFileSync(file)).digest('hex');

function open(stateDir: string, nodeId = NODE_ID): Promise<NodeSpool> {
  return openNodeSpool({ stateDir, nodeId, holder: ConfigHolder.notReady('test'), logger: quietLogger(), synchronous: 'normal' });
}

/** A closed spool (no WAL left) holding `count` records `<prefix><i>`. */
async function spoolWith(t: Test, nodeId: string, prefix: string, count: number): Promise<string> {
  const dir = tempStateDir(t);
  const spool = await open(dir, nodeId);
  await Promise.all(Array.from({ length: count }, (_, i) => spool.spool.finalise(record(`${prefix}${i}`, { nodeId }))));
  await spool.close();
  return dir;
}

/** A WAL of the spool in `dir` with `count` more committed records, copied before its connection closes (which would checkpoint and delete it). */
function walWithRecords(dir: string, nodeId: string, prefix: string, count: number): Buffer {
  const file = path.join(dir, 'spool.db');
  const db = new Database(file);
  try {
    db.pragma('wal_autocheckpoint = 0');
    const insert = db.prepare('insert into records (request_id, record_json) values (?, ?)');
    db.transaction(() => {
      for (let i = 0; i < count; i++) insert.run(`${prefix}${i}`, JSON.stringify(record(`${prefix}${i}`, { nodeId })));
    })();
    return readFileSync(`${file}-wal`);
  } finally {
    db.close();
  }
}

async function expectForeignWalRefused(t: Test, dir: string): Promise<void> {
  const file = path.join(dir, 'spool.db');
  const wal = `${file}-wal`;
  const before = { db: sha(file), wal: sha(wal) };
  const check = await checkSpool(await openStateStore(dir, { create: false }), NODE_ID);
  t.notOk(check.ok, 'doctor fails its spool check');
  t.match(check.advice, /has a WAL .*spool\.db-wal\) that does not belong to it/, 'doctor gives serve\'s refusal');
  try {
    await open(dir);
    t.fail('serve opened the spool');
  } catch (err) {
    t.ok(err instanceof SpoolRefusedError, 'serve refuses with a SpoolRefusedError');
    t.match((err as Error).message, /does not belong to it/, 'the message says the WAL is not this spool\'s');
    t.match((err as Error).message, /Move spool\.db-wal \(and spool\.db-shm\) aside, never spool\.db/, 'the message says which file to move');
  }
  t.same({ db: sha(file), wal: sha(wal) }, before, 'spool.db and its -wal are byte-identical');
  t.same(readdirSync(dir).filter((e) => e.startsWith('spool.db.new-')), [], 'no private link dir is left behind');
}

/** The spool's records once the foreign WAL (and its -shm) is moved aside. */
async function recordsAfterMovingWalAside(t: Test, dir: string): Promise<string[]> {
  const file = path.join(dir, 'spool.db');
  const aside = path.join(tempStateDir(t), 'moved');
  mkdirSync(aside);
  for (const sidecar of ['spool.db-wal', 'spool.db-shm']) if (existsSync(path.join(dir, sidecar))) renameSync(path.join(dir, sidecar), path.join(aside, sidecar));
  const spool = await open(dir);
  const backlog = spool.figures().backfillBacklog;
  await spool.close();
  const db = new Database(file, { readonly: true });
  try {
    const ids = db.prepare('select request_id from records order by sequence').pluck().all() as string[];
    t.equal(backlog, ids.length, 'serve opens it with its own backlog');
    return ids;
  } finally {
    db.close();
  }
}

const own = Array.from({ length: 50 }, (_, i) => `a${i}`);

t.test("a WAL of another node's spool beside spool.db is refused by serve and doctor, and the spool's records are all there once it is moved aside", async (t) => {
  const dir = await spoolWith(t, NODE_ID, 'a', 50);
  const other = await spoolWith(t, OTHER_NODE, 'b', 50);
  const wal = walWithRecords(other, OTHER_NODE, 'bw', 200);
  writeFileSync(path.join(dir, 'spool.db-wal'), wal, { mode: 0o600 });
  await expectForeignWalRefused(t, dir);
  t.same(await recordsAfterMovingWalAside(t, dir), own, "every one of the spool's records, none of the other spool's");
});

t.test('a WAL of another spool of the same node beside spool.db is refused by serve and doctor, and the spool\'s records are all there once it is moved aside', async (t) => {
  const dir = await spoolWith(t, NODE_ID, 'a', 50);
  const other = await spoolWith(t, NODE_ID, 'x', 50);
  const wal = walWithRecords(other, NODE_ID, 'xw', 200);
  writeFileSync(path.join(dir, 'spool.db-wal'), wal, { mode: 0o600 });
  await expectForeignWalRefused(t, dir);
  t.same(await recordsAfterMovingWalAside(t, dir), own, "every one of the spool's records, none of the other spool's");
});

t.test('a WAL of a copy of this spool that went another way is refused, and the spool is whole once it is moved aside', async (t) => {
  const dir = await spoolWith(t, NODE_ID, 'a', 50);
  const copy = tempStateDir(t);
  cpSync(path.join(dir, 'spool.db'), path.join(copy, 'spool.db'));
  // This spool moves on (checkpointed at close), then the copy's WAL with 5 other records lands beside it.
  const spool = await open(dir);
  await Promise.all(Array.from({ length: 30 }, (_, i) => spool.spool.finalise(record(`more${i}`))));
  await spool.close();
  const wal = walWithRecords(copy, NODE_ID, 'cw', 5);
  writeFileSync(path.join(dir, 'spool.db-wal'), wal, { mode: 0o600 });
  await expectForeignWalRefused(t, dir);
  t.same(await recordsAfterMovingWalAside(t, dir), [...own, ...Array.from({ length: 30 }, (_, i) => `more${i}`)], "every one of the spool's records");
});

/** A spool a node-edge stand-in (spool-wal-child.ts) wrote and was killed -9 over, its WAL not checkpointed. */
async function killedNode(t: Test, mode: 'whole' | 'reset', groups: number, after = 0): Promise<{ dir: string; committed: number }> {
  const dir = tempStateDir(t);
  await (await open(dir)).close();
  const file = path.join(dir, 'spool.db');
  const meta = vetSpoolFile(file, NODE_ID);
  const child = spawnSync(process.execPath, ['--import', 'tsx', CHILD, file, JSON.stringify(meta), mode, String(groups), String(after)], { encoding: 'utf8', timeout: 120_000 });
  t.equal(child.signal, 'SIGKILL', `the node was killed with SIGKILL${child.stderr ? ` (${child.stderr})` : ''}`);
  return { dir, committed: Number(child.stdout.trim()) };
}

for (const [mode, groups, after, what] of [
  ['whole', 10, 0, 'every record in the WAL'],
  ['reset', 10, 3, 'records in spool.db and more in a WAL started again over them'],
] as const) {
  t.test(`the WAL a killed node leaves (${what}) still opens with every record, and doctor passes it`, async (t) => {
    const node = await killedNode(t, mode, groups, after);
    t.equal(node.committed, (groups + after) * 10, 'every finalise resolved before the kill');
    t.ok(readFileSync(path.join(node.dir, 'spool.db-wal')).length > 32, 'a WAL with frames is left');
    const check = await checkSpool(await openStateStore(node.dir, { create: false }), NODE_ID);
    t.ok(check.ok, `doctor passes it (${check.advice ?? check.label})`);
    const spool = await open(node.dir);
    t.equal(spool.figures().backfillBacklog, node.committed, 'serve opens it with every record');
    await spool.close();
  });
}

t.test('a WAL of this spool in which records were delivered (out of order too) and more written still opens with every record it holds', async (t) => {
  const dir = await spoolWith(t, NODE_ID, 'a', 50);
  const file = path.join(dir, 'spool.db');
  const db = new Database(file);
  let kept: { db: Buffer; wal: Buffer };
  try {
    db.pragma('wal_autocheckpoint = 0');
    // Acks deleting batches 21..30 before 11..20 came in, and 1..10; then 5 more records.
    db.prepare('delete from records where sequence between ? and ?').run(21, 30);
    db.prepare('delete from records where sequence between ? and ?').run(1, 10);
    const insert = db.prepare('insert into records (request_id, record_json) values (?, ?)');
    for (let i = 0; i < 5; i++) insert.run(`n${i}`, JSON.stringify(record(`n${i}`)));
    // What a kill leaves: spool.db as it was on disk (nothing checkpointed) and the WAL.
    kept = { db: readFileSync(file), wal: readFileSync(`${file}-wal`) };
  } finally {
    db.close();
  }
  writeFileSync(file, kept.db);
  writeFileSync(`${file}-wal`, kept.wal, { mode: 0o600 });
  const check = await checkSpool(await openStateStore(dir, { create: false }), NODE_ID);
  t.ok(check.ok, `doctor passes it (${check.advice ?? check.label})`);
  const spool = await open(dir);
  t.equal(spool.figures().backfillBacklog, 35, 'serve opens it with every record it holds');
  await spool.close();
});
