/**
 * `zenova-node status` reads the spool with a read-only connection while node-edge may be starting
 * (a systemd restart). The reader must never remove the -wal/-shm it created: node-edge may have
 * opened them meanwhile, and its writer would then append to an unlinked WAL, losing every record
 * at the next kill -9. Run as root, the reader leaves sidecars that spool.db's owner can open.
 */
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { readSpoolFigures } from '../../../edge-node/src/spool/spool-figures.js';
import { createSpoolFile, withReadOnlySpool } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { NODE_ID, quietLogger, tempStateDir } from './spool-helpers.js';

const CHILD = fileURLToPath(new URL('./spool-writer-child.ts', import.meta.url));
const limits = () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' as const });
const inode = (f: string): number | null => (existsSync(f) ? statSync(f).ino : null);
const sleepSync = (ms: number): void => void Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

t.test('node-edge opening the spool while status reads it keeps every committed record through a kill -9', async (t) => {
  const dir = tempStateDir(t);
  const file = path.join(dir, 'spool.db');
  const meta = createSpoolFile(file, NODE_ID);
  // A node-edge that stopped cleanly: WAL mode, no sidecars left.
  await new SpoolStore({ file, meta, logger: quietLogger(), limits }).close();
  t.notOk(existsSync(`${file}-wal`) || existsSync(`${file}-shm`), 'no sidecars before status runs');

  const N = 200;
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD, file, String(N)], { stdio: ['ignore', 'inherit', 'inherit'] });
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) => child.on('exit', (code, signal) => resolve(signal ?? code)));
  t.teardown(() => void child.kill('SIGKILL'));

  // status: its read-only connection created the sidecars, and node-edge opens them before it closes.
  const inodes = withReadOnlySpool(file, (db) => {
    db.prepare('select count(*) from records').pluck().get();
    const deadline = Date.now() + 60_000;
    while (!existsSync(path.join(dir, 'ready')) && Date.now() < deadline) sleepSync(20);
    return [inode(`${file}-wal`), inode(`${file}-shm`)];
  });
  t.ok(existsSync(path.join(dir, 'ready')), 'node-edge opened the spool while status was reading');
  t.same([inode(`${file}-wal`), inode(`${file}-shm`)], inodes, 'status left the sidecars node-edge holds in place');

  writeFileSync(path.join(dir, 'go'), '1');
  t.equal(await exited, 'SIGKILL', 'node-edge was killed with SIGKILL');
  t.equal(Number(readFileSync(path.join(dir, 'resolved'), 'utf8')), N, 'every finalise resolved before the kill');

  const after = new SpoolStore({ file, meta, logger: quietLogger(), limits });
  t.teardown(() => after.close());
  t.equal(after.backlogCount(), N, 'every committed record is in the spool after the restart');
});

t.test('status run as root leaves sidecars owned like spool.db, which its owner can open and write', { skip: process.geteuid?.() !== 0 ? 'needs root' : false }, async (t) => {
  const dir = tempStateDir(t);
  const file = path.join(dir, 'spool.db');
  const meta = createSpoolFile(file, NODE_ID);
  await new SpoolStore({ file, meta, logger: quietLogger(), limits }).close();
  // The service user's state dir, as the installer would leave it (an unprivileged uid here).
  const uid = 65534;
  chownSync(dir, uid, uid);
  chmodSync(dir, 0o700);
  chownSync(file, uid, uid);
  chmodSync(file, 0o600);

  const figures = readSpoolFigures(dir);
  t.match(figures, { backlog: 0, open: 0, error: null });
  for (const sidecar of [`${file}-wal`, `${file}-shm`]) {
    const st = statSync(sidecar);
    t.same({ uid: st.uid, gid: st.gid, mode: st.mode & 0o777 }, { uid, gid: uid, mode: 0o600 }, `${path.basename(sidecar)} has spool.db's owner, group and mode`);
  }

  // node-edge as that user: opens the spool read-write through those sidecars and commits.
  const sqlite = fileURLToPath(import.meta.resolve('better-sqlite3'));
  const script = `const D = require(${JSON.stringify(sqlite)}); const db = new D(${JSON.stringify(file)}); db.pragma('journal_mode = WAL');
    db.prepare("insert into meta (key, value) values ('probe', '1')").run(); db.close();`;
  const run = spawnSync(process.execPath, ['-e', script], { uid, gid: uid, encoding: 'utf8', env: { PATH: process.env.PATH ?? '' } });
  const probe = withReadOnlySpool(file, (db) => db.prepare("select value from meta where key = 'probe'").pluck().get());
  t.equal(probe, '1', `the spool's owner wrote through the sidecars status created${probe === '1' ? '' : ` (exit ${run.status}: ${run.stderr})`}`);
});
