// A credit lease book whose WAL has a damaged frame (or header) before committed transactions is
// refused, and the book and its WAL are left byte-identical: SQLite's recovery silently drops every
// frame from the first bad one on, quick_check passed the shorter book, and the first close deleted
// the WAL, so a lease's spent figure fell back (200 000 → 40 000 µ) and the node could spend that
// credit again. The WAL a node killed -9 leaves (also with a torn last frame) is read with what it
// committed, and a replica starting beside a live one that writes the book is never refused.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readFileSync, truncateSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import type { Test } from 'tap';
import { LEASE_DB_FILE, openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { StateFileError } from '../../../edge-node/src/state/state-store.js';
import { serveRefusal } from '../serve-refusal.js';
import { startFakeGateway, writeEnrolledState } from '../control-fixtures.js';
import { tempStateDir } from '../spool/spool-helpers.js';
import { FRAME_HEADER_BYTES, WAL_HEADER_BYTES, flipByte, walShape } from '../../fixtures/wal-damage.js';

const CHILD = fileURLToPath(new URL('./lease-wal-child.ts', import.meta.url));
/** What lease-wal-child.ts `spend` writes: lease-1 charged 20 × 10 000 µ, as this node. */
const NODE_ID = 'node-lease-wal-1';
const SPENT = 200_000;

const sha = (file: string): string => createHash('sha256').update(readFileSync(file)).digest('hex');

interface KilledNode {
  dir: string;
  file: string;
  wal: string;
}

/** `dir` (a new temp dir by default) with a lease book a node charged 200 000 µ from and was killed -9 over. */
function killedNode(t: Test, dir = tempStateDir(t)): KilledNode {
  const child = spawnSync(process.execPath, ['--import', 'tsx', CHILD, dir, 'spend'], { encoding: 'utf8', timeout: 60_000 });
  t.equal(child.signal, 'SIGKILL', `the node was killed with SIGKILL${child.stderr ? ` (${child.stderr})` : ''}`);
  t.equal(Number(child.stdout.trim()), SPENT, 'every charge was written before the kill');
  const file = path.join(dir, LEASE_DB_FILE);
  return { dir, file, wal: `${file}-wal` };
}

/** A bit flip in the page data of the WAL's middle frame; returns that frame's number (1-based) and the count. */
function damageMiddleFrame(wal: string): { frame: number; frames: number } {
  const { frameBytes, frames } = walShape(wal);
  const middle = Math.floor(frames / 2);
  flipByte(wal, WAL_HEADER_BYTES + middle * frameBytes + FRAME_HEADER_BYTES + 100);
  return { frame: middle + 1, frames };
}

function spentOf(dir: string): number | undefined {
  const store = openLeaseStore(dir, { nodeId: NODE_ID });
  try {
    return store.load().find((l) => l.leaseId === 'lease-1')?.spent;
  } finally {
    store.close();
  }
}

function expectRefused(t: Test, node: KilledNode, pattern: RegExp): void {
  try {
    openLeaseStore(node.dir, { nodeId: NODE_ID }).close();
    t.fail('the lease book was opened');
  } catch (err) {
    t.ok(err instanceof StateFileError, `a StateFileError (${(err as Error).name}: ${(err as Error).message})`);
    t.equal((err as StateFileError).file, node.file, 'naming the file');
    t.match((err as Error).message, pattern, 'saying what is wrong');
    t.match((err as Error).message, /left untouched because it records what this node spent .* move it aside together with its -wal and -shm/, 'and what to do');
  }
}

/** A lease-wal-child.ts holding role, running until the test ends. */
async function startChild(t: Test, dir: string, role: 'slot' | 'recovered' | 'writer'): Promise<void> {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD, dir, role], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  t.teardown(async () => {
    child.kill('SIGKILL');
    await exited;
  });
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      if (out.includes('ready\n')) resolve();
    });
    child.once('exit', (code, signal) => reject(new Error(`the ${role} child exited (${code ?? signal}) before it was ready`)));
  });
}

t.test('a lease book whose WAL has a damaged frame before committed transactions is refused and left untouched', async (t) => {
  const node = killedNode(t);
  const { frame, frames } = damageMiddleFrame(node.wal);
  const before = { db: sha(node.file), wal: sha(node.wal) };
  const pattern = new RegExp(`has a WAL \\(${node.wal}\\) with a damaged frame \\(${frame} of ${frames}\\) followed by committed transactions, which SQLite would drop`);
  expectRefused(t, node, pattern);
  expectRefused(t, node, pattern);
  t.ok(existsSync(node.wal), 'the -wal is still there');
  t.same({ db: sha(node.file), wal: sha(node.wal) }, before, 'credit-leases.sqlite and its -wal are byte-identical');
  // The refusals kept what the node spent: with the frame repaired, all of it is there.
  damageMiddleFrame(node.wal);
  t.equal(spentOf(node.dir), SPENT, 'the book repaired still holds every charge');
});

t.test('a lease book whose WAL header is damaged is refused and left untouched', async (t) => {
  const node = killedNode(t);
  flipByte(node.wal, 25);
  const before = { db: sha(node.file), wal: sha(node.wal) };
  expectRefused(t, node, /has a WAL .* whose header is damaged, so SQLite would drop every transaction in it/);
  t.same({ db: sha(node.file), wal: sha(node.wal) }, before, 'byte-identical');
});

t.test('serve refuses a lease book whose WAL is damaged with one line naming it, exit 2, and leaves it as it was', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway);
  const node = killedNode(t, state.dir);
  const { frame, frames } = damageMiddleFrame(node.wal);
  const before = { db: sha(node.file), wal: sha(node.wal) };
  const { listened, code, said, output } = await serveRefusal(t, state.dir);
  t.notOk(listened, 'serve did not start');
  if (listened) return;
  t.equal(code, 2, 'exit 2, as for every damaged state file');
  t.equal(said.length, 1, 'one line');
  t.match(said[0], `zenova-node: ${node.file}: has a WAL (${node.wal}) with a damaged frame (${frame} of ${frames}) followed by committed transactions`);
  t.notMatch(output, /node-edge listening|unexpected failure/);
  t.same({ db: sha(node.file), wal: sha(node.wal) }, before, 'credit-leases.sqlite and its -wal are byte-identical');
});

t.test('the WAL a node killed -9 left is read with every charge, and one with a torn last frame without the charge it ended', async (t) => {
  const whole = killedNode(t);
  t.equal(spentOf(whole.dir), SPENT, 'all 20 charges');
  const torn = killedNode(t);
  const { frameBytes, frames } = walShape(torn.wal);
  // The last frame committed the last charge: a power loss can cut it short.
  truncateSync(torn.wal, WAL_HEADER_BYTES + (frames - 1) * frameBytes + FRAME_HEADER_BYTES + 1000);
  t.equal(spentOf(torn.dir), SPENT - 10_000, 'the 19 charges before it');
});

t.test('replicas starting together after a crash are refused too: another one holding its spool owner slot has not read the WAL yet', async (t) => {
  const node = killedNode(t);
  damageMiddleFrame(node.wal);
  const before = { db: sha(node.file), wal: sha(node.wal) };
  await startChild(t, node.dir, 'slot');
  expectRefused(t, node, /with a damaged frame .* followed by committed transactions/);
  t.same({ db: sha(node.file), wal: sha(node.wal) }, before, 'byte-identical');
});

t.test('a replica starting beside a live one that already went on without the damaged WAL\'s commits is not refused, and says so', async (t) => {
  const node = killedNode(t);
  damageMiddleFrame(node.wal);
  // As an earlier release did: opened without the walk, its recovery dropped the commits after the damage.
  await startChild(t, node.dir, 'recovered');
  // The same files with no process left on them: refused, whatever the -shm says.
  const gone = path.join(tempStateDir(t), 'copy');
  mkdirSync(gone);
  for (const suffix of ['', '-wal', '-shm']) cpSync(`${node.file}${suffix}`, path.join(gone, `${LEASE_DB_FILE}${suffix}`));
  const warnings: string[] = [];
  const logger = { warn: (_obj: unknown, msg: string) => void warnings.push(msg), info: () => undefined };
  t.doesNotThrow(() => openLeaseStore(node.dir, { nodeId: NODE_ID, logger: logger as never }).close(), 'refusing it would restore nothing');
  t.match(warnings, [/damaged frame .* another node-edge serving from this state dir already opened it and went on without those transactions/], 'a warning says what was lost');
  expectRefused(t, { dir: gone, file: path.join(gone, LEASE_DB_FILE), wal: path.join(gone, `${LEASE_DB_FILE}-wal`) }, /with a damaged frame .* followed by committed transactions/);
});

t.test('a replica starting beside one that writes the lease book without pause is never refused', async (t) => {
  const node = killedNode(t);
  t.equal(spentOf(node.dir), SPENT);
  await startChild(t, node.dir, 'writer');
  const generations = new Set<string>();
  for (let i = 0; i < 100; i++) {
    generations.add(readFileSync(node.wal).subarray(16, 24).toString('hex'));
    openLeaseStore(node.dir, { nodeId: NODE_ID }).close();
  }
  t.pass('100 starts, none refused');
  t.ok(generations.size > 1, `the writer started its WAL again meanwhile (${generations.size} generations seen)`);
});
