// A spool WAL with a damaged frame or header before committed transactions is refused, and the
// spool and its WAL are left byte-identical: SQLite's recovery silently drops every frame from the
// first bad one on, so opening it lost answered records and the next close deleted the evidence.
// The WALs a node leaves when it is killed (also with a torn last frame, or after a checkpoint let
// the WAL start again) are accepted with the records SQLite recovers from them.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, truncateSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import type { Test } from 'tap';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import type { NodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { readSpoolFigures } from '../../../edge-node/src/spool/spool-figures.js';
import { SpoolRefusedError, vetSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { NODE_ID, quietLogger, startReplica, tempStateDir } from './spool-helpers.js';
import { FRAME_HEADER_BYTES, WAL_HEADER_BYTES, flipByte, walShape } from '../../fixtures/wal-damage.js';

const CHILD = fileURLToPath(new URL('./spool-wal-child.ts', import.meta.url));

const sha = (file: string): string => createHash('sha256').update(readFileSync(file)).digest('hex');

async function open(stateDir: string): Promise<NodeSpool> {
  return openNodeSpool({ stateDir, nodeId: NODE_ID, holder: ConfigHolder.notReady('test'), logger: quietLogger(), synchronous: 'normal' });
}

interface KilledNode {
  dir: string;
  file: string;
  wal: string;
  /** Records whose finalise resolved before the kill. */
  committed: number;
}

/** A state dir whose spool a node-edge stand-in (spool-wal-child.ts) wrote and was killed -9 over. */
async function killedNode(t: Test, mode: 'whole' | 'reset', groups: number, after = 0): Promise<KilledNode> {
  const dir = tempStateDir(t);
  await (await open(dir)).close();
  const file = path.join(dir, 'spool.db');
  const meta = vetSpoolFile(file, NODE_ID);
  const child = spawnSync(process.execPath, ['--import', 'tsx', CHILD, file, JSON.stringify(meta), mode, String(groups), String(after)], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  t.equal(child.signal, 'SIGKILL', `the node was killed with SIGKILL${child.stderr ? ` (${child.stderr})` : ''}`);
  const committed = Number(child.stdout.trim());
  t.equal(committed, (groups + after) * 10, 'every finalise resolved before the kill');
  return { dir, file, wal: `${file}-wal`, committed };
}

async function expectWalRefusal(t: Test, node: KilledNode, pattern: RegExp): Promise<void> {
  const before = { db: sha(node.file), wal: sha(node.wal) };
  await t.rejects(open(node.dir), pattern);
  try {
    await open(node.dir);
    t.fail('the second start was refused too');
  } catch (err) {
    t.ok(err instanceof SpoolRefusedError, 'a SpoolRefusedError');
    t.match((err as Error).message, node.file, 'the message names the file');
    t.match((err as Error).message, /left untouched.*Move it aside together with its -wal and -shm/, 'the message says what to do');
  }
  t.ok(existsSync(node.wal), 'the -wal is still there');
  t.same({ db: sha(node.file), wal: sha(node.wal) }, before, 'spool.db and its -wal are byte-identical');
  const figures = readSpoolFigures(node.dir);
  t.match(figures?.error, pattern, 'status shows the spool as unreadable instead of counting a short backlog');
  t.same({ db: sha(node.file), wal: sha(node.wal) }, before, 'status changed neither');
}

async function expectAccepted(t: Test, node: KilledNode, records: number): Promise<void> {
  t.equal(readSpoolFigures(node.dir)?.backlog, records, 'status counts the records');
  const spool = await open(node.dir);
  t.equal(spool.figures().backfillBacklog, records, 'serve starts with the records SQLite recovers');
  await spool.close();
}

t.test('a spool whose WAL has a damaged frame before committed transactions is refused and left untouched', async (t) => {
  const node = await killedNode(t, 'whole', 10);
  const { frameBytes, frames } = walShape(node.wal);
  t.ok(frames >= 20, `the WAL holds the commits' frames (${frames})`);
  // A bit flip in the page data of the middle frame.
  flipByte(node.wal, WAL_HEADER_BYTES + Math.floor(frames / 2) * frameBytes + FRAME_HEADER_BYTES + 100);
  await expectWalRefusal(t, node, new RegExp(`damaged frame \\(${Math.floor(frames / 2) + 1} of ${frames}\\) followed by committed transactions`));
});

t.test('a spool whose WAL header checksum is damaged is refused and left untouched', async (t) => {
  const node = await killedNode(t, 'whole', 10);
  flipByte(node.wal, 25);
  await expectWalRefusal(t, node, /WAL .* whose header is damaged/);
});

t.test('a WAL a node killed -9 left is accepted with every committed record', async (t) => {
  const node = await killedNode(t, 'whole', 10);
  await expectAccepted(t, node, node.committed);
});

t.test('a WAL whose last frame is torn or damaged is accepted without the transaction it ended', async (t) => {
  for (const tear of ['cut short', 'damaged'] as const) {
    const node = await killedNode(t, 'whole', 10);
    const { frameBytes, frames } = walShape(node.wal);
    const lastFrame = WAL_HEADER_BYTES + (frames - 1) * frameBytes;
    if (tear === 'cut short') truncateSync(node.wal, lastFrame + FRAME_HEADER_BYTES + 1000);
    else flipByte(node.wal, lastFrame + FRAME_HEADER_BYTES + 100);
    // The last frame committed the last group commit (10 records): power loss can lose it.
    if (tear === 'cut short') {
      // The killed node's -shm still counts that frame: status names the loss (answered records
      // gone) instead of a smaller backlog, and serve starts without them, logging it (see
      // answered-records-lost-with-a-missing-or-cut-short-wal-are-named-by-status-doctor-and-serve.test.ts).
      t.match(readSpoolFigures(node.dir)?.error, /lost committed transactions: its WAL \(.*\) is cut short/, 'status names the lost transaction');
      const spool = await open(node.dir);
      t.equal(spool.figures().backfillBacklog, node.committed - 10, 'serve starts with the records SQLite recovers');
      await spool.close();
    } else {
      await expectAccepted(t, node, node.committed - 10);
    }
  }
});

t.test('a WAL started again after a checkpoint, with the older frames after the current ones, is accepted with every record', async (t) => {
  const node = await killedNode(t, 'reset', 10, 2);
  const wal = readFileSync(node.wal);
  const { frameBytes, frames } = walShape(node.wal);
  const salts = wal.subarray(16, 24);
  const stale = Array.from({ length: frames }, (_, i) => wal.subarray(WAL_HEADER_BYTES + i * frameBytes + 8, WAL_HEADER_BYTES + i * frameBytes + 16)).filter(
    (frameSalts) => !frameSalts.equals(salts),
  ).length;
  t.ok(stale > 0 && stale < frames, `the WAL ends with frames of its previous generation (${stale} of ${frames})`);
  await expectAccepted(t, node, node.committed);
});

t.test('a spool another live replica holds open is not refused for its WAL, and is again once that replica is gone', async (t) => {
  // The replica's connection recovered the WAL when it opened it (vetted before), and its writes
  // would only show a walk two generations of frames; the check is for what a crash leaves.
  const node = await killedNode(t, 'whole', 10);
  const { frameBytes, frames } = walShape(node.wal);
  flipByte(node.wal, WAL_HEADER_BYTES + Math.floor(frames / 2) * frameBytes + FRAME_HEADER_BYTES + 100);
  const before = { db: sha(node.file), wal: sha(node.wal) };
  const replica = await startReplica(t, node.file, 'hold');
  t.doesNotThrow(() => vetSpoolFile(node.file, NODE_ID), 'a replica starting beside it is not refused');
  t.equal(readSpoolFigures(node.dir)?.error, null, 'status does not show it unreadable');
  await replica.stop();
  t.throws(() => vetSpoolFile(node.file, NODE_ID), /damaged frame .* followed by committed transactions/, 'with no replica left, the start is refused');
  t.same({ db: sha(node.file), wal: sha(node.wal) }, before, 'spool.db and its -wal are byte-identical');
});
