// A spool.db that is gone while the -wal and -shm a kill -9 left beside it are still there: a new
// spool would replay that WAL, and the lost spool's records would appear in it. Starting is refused
// instead (after spool.json was moved aside, as the missing-spool refusal advises), naming them.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { checkSpool } from '../../../edge-node/src/doctor/spool-check.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { SpoolRefusedError } from '../../../edge-node/src/spool/spool-file.js';
import { openStateStore } from '../../../edge-node/src/state/state-store.js';
import { NODE_ID, quietLogger, spoolState, tempStateDir } from './spool-helpers.js';

const CRASH_CHILD = fileURLToPath(new URL('./spool-node-crash-child.ts', import.meta.url));
const sha = (file: string): string => createHash('sha256').update(readFileSync(file)).digest('hex');

function open(stateDir: string) {
  return openNodeSpool({ stateDir, nodeId: NODE_ID, holder: ConfigHolder.notReady('test'), logger: quietLogger(), synchronous: 'normal', replicas: 1 });
}

/** A state dir a node-edge was killed -9 in (one open row in its WAL), whose spool.db and spool.json were then moved aside. */
function stateWithLostSpool(t: { teardown(fn: () => unknown): void }): { dir: string; file: string } {
  const dir = tempStateDir(t);
  const file = path.join(dir, 'spool.db');
  const crash = spawnSync(process.execPath, ['--import', 'tsx', CRASH_CHILD, dir], { stdio: 'inherit' });
  if (crash.signal !== 'SIGKILL') throw new Error(`the crash child ended with ${crash.signal ?? crash.status}, not SIGKILL`);
  mkdirSync(path.join(dir, 'aside'));
  renameSync(file, path.join(dir, 'aside', 'spool.db'));
  renameSync(path.join(dir, 'spool.json'), path.join(dir, 'aside', 'spool.json'));
  return { dir, file };
}

t.test('a new spool is refused while a non-empty spool.db-wal from a lost spool is still there, naming it, and nothing is created', async (t) => {
  const { dir, file } = stateWithLostSpool(t);
  const wal = `${file}-wal`;
  t.ok(statSync(wal).size > 0, 'the kill left a non-empty -wal');
  const before = sha(wal);
  const err = await open(dir).then(
    async (node) => {
      const replayed = spoolState(file);
      await node.close();
      return replayed;
    },
    (e: unknown) => e,
  );
  t.ok(err instanceof SpoolRefusedError, `a SpoolRefusedError (got ${JSON.stringify(err)})`);
  t.match((err as Error).message, `${file}: is missing, but ${wal} and ${file}-shm of an earlier spool are still beside it`);
  t.match((err as Error).message, 'move spool.db-wal and spool.db-shm aside too (keep them with the rest of that spool) and start again');
  t.notOk(existsSync(file), 'no new spool.db was created');
  t.notOk(existsSync(path.join(dir, 'spool.json')), 'no marker was written');
  t.equal(existsSync(wal) ? sha(wal) : null, before, 'the -wal is byte-identical');
});

t.test('once the leftover -wal and -shm are moved aside too, a new empty spool is created', async (t) => {
  const { dir, file } = stateWithLostSpool(t);
  for (const sidecar of ['spool.db-wal', 'spool.db-shm']) renameSync(path.join(dir, sidecar), path.join(dir, 'aside', sidecar));
  const node = await open(dir);
  t.teardown(() => node.close());
  t.same(spoolState(file), { open: [], records: [] }, 'nothing of the old spool in the new one');
});

t.test('an empty spool.db-wal left without spool.db does not stop a new spool', async (t) => {
  const dir = tempStateDir(t);
  const file = path.join(dir, 'spool.db');
  writeFileSync(`${file}-wal`, '');
  const node = await open(dir);
  t.teardown(() => node.close());
  t.same(spoolState(file), { open: [], records: [] });
});

t.test('a spool.db-shm left alone beside an empty spool.db-wal (a checkpoint truncated the WAL before the kill) does not stop a new spool', async (t) => {
  const dir = tempStateDir(t);
  const file = path.join(dir, 'spool.db');
  writeFileSync(`${file}-wal`, '');
  writeFileSync(`${file}-shm`, Buffer.alloc(32 * 1024, 1));
  const node = await open(dir);
  t.teardown(() => node.close());
  t.same(spoolState(file), { open: [], records: [] });
});

t.test('doctor fails the spool check with the same refusal when a lost spool\'s -wal is still there', async (t) => {
  const { dir, file } = stateWithLostSpool(t);
  const check = await checkSpool(await openStateStore(dir, { create: false }), NODE_ID);
  t.equal(check.ok, false, `doctor fails it (${check.label})`);
  t.match(check.advice, `\`serve\` refuses to start with it: ${file}: is missing, but ${file}-wal and ${file}-shm of an earlier spool are still beside it`);
});
