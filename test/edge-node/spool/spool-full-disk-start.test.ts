// A node restarted after a crash while its disk is still full: the spool opens, refuses new
// requests with ZN_ERR_SPOOL_FULL, and records the requests the crash left open once space returns
// (docs/spool.md, "Disk full"). The disk is a real tmpfs filled to ENOSPC (root only; skipped
// where mount is not permitted).
import { rmSync, statSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import t from 'tap';
import { fillDisk, mountSmallDisk, tmpfsSkip } from '../../fixtures/small-disk.js';
import type { Test } from 'tap';
import { isZenovaError } from '../../../edge-node/src/errors.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import type { SpoolMeta } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { NODE_ID, openRow, quietLogger, spoolState } from './spool-helpers.js';

const limits = () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' as const });

const skip = tmpfsSkip();
const CRASH_CHILD = fileURLToPath(new URL('./spool-node-crash-child.ts', import.meta.url));

/**
 * The state a crash leaves: two requests' open rows committed, the store gone (its owner slot free),
 * and the WAL beside spool.db (checkpointed to 0 bytes, so the next write must grow it). A
 * connection kept open holds the -wal and -shm in place, as a killed process leaves them.
 */
async function crashedSpool(dir: string, closeFirst: Array<() => unknown>): Promise<{ file: string; meta: SpoolMeta }> {
  const file = path.join(dir, 'spool.db');
  const meta = createSpoolFile(file, NODE_ID);
  const before = new SpoolStore({ file, meta, logger: quietLogger(), limits });
  await Promise.all([before.open(openRow('req-a')), before.open(openRow('req-b'))]);
  const sidecarHolder = new Database(file);
  closeFirst.unshift(() => sidecarHolder.close());
  await before.close();
  sidecarHolder.pragma('wal_checkpoint(TRUNCATE)');
  return { file, meta };
}

function expectSpoolFull(t: Test, fn: () => unknown): void {
  try {
    fn();
    t.fail('expected ZN_ERR_SPOOL_FULL');
  } catch (err) {
    t.ok(isZenovaError(err) && err.code === 'ZN_ERR_SPOOL_FULL', `open() refuses with ZN_ERR_SPOOL_FULL (${(err as Error).message})`);
  }
}

t.test('a spool with requests left open by a crash opens on a full disk, refuses new requests, and records them as interrupted once space returns', { skip }, async (t) => {
  const closeFirst: Array<() => unknown> = [];
  const dir = mountSmallDisk(t, '1m', closeFirst);
  const { file, meta } = await crashedSpool(dir, closeFirst);
  const filler = fillDisk(dir);
  t.equal(statSync(`${file}-wal`).size, 0, 'the WAL is empty, so recording anything needs space');

  const restarted = new SpoolStore({ file, meta, logger: quietLogger(), limits, retryMs: 20 });
  closeFirst.unshift(() => restarted.close());
  t.equal(restarted.pending().writeFailing, true, 'the recovery commit failed and is retried');
  t.equal(restarted.pending().finals, 2, 'the two interrupted records wait in the queue');
  expectSpoolFull(t, () => restarted.open(openRow('new-while-full')));
  t.equal(restarted.backlogCount(), 0, 'nothing is counted in the backlog before it is written');
  t.same(spoolState(file), { open: ['req-a', 'req-b'], records: [] }, 'the open rows stay until their records are written');

  rmSync(filler);
  await waitFor(() => !restarted.pending().writeFailing, { what: 'the queued recovery to commit once space returned' });
  t.same(
    spoolState(file),
    { open: [], records: [{ id: 'req-a', status: 'interrupted', reservedMicros: 1500 }, { id: 'req-b', status: 'interrupted', reservedMicros: 1500 }] },
    'both are interrupted records with their reservations, and their open rows are gone',
  );
  t.equal(restarted.backlogCount(), 2, 'the backlog counts them once written');
  await restarted.open(openRow('new-after-space-returned'));
  t.same(spoolState(file).open, ['new-after-space-returned'], 'new requests are accepted again');
});

t.test('a spool closed before the disk took its recovery leaves the open rows for the next start', { skip }, async (t) => {
  const closeFirst: Array<() => unknown> = [];
  const dir = mountSmallDisk(t, '1m', closeFirst);
  const { file, meta } = await crashedSpool(dir, closeFirst);
  const filler = fillDisk(dir);

  const whileFull = new SpoolStore({ file, meta, logger: quietLogger(), limits, retryMs: 20 });
  await whileFull.close();
  t.same(spoolState(file), { open: ['req-a', 'req-b'], records: [] }, 'nothing was recorded and nothing was lost');

  rmSync(filler);
  const next = new SpoolStore({ file, meta, logger: quietLogger(), limits });
  closeFirst.unshift(() => next.close());
  t.same(spoolState(file).records.map((r) => `${r.id}:${r.status}`), ['req-a:interrupted', 'req-b:interrupted'], 'the next start records them');
  t.equal(next.backlogCount(), 2);
});

t.test("a node killed -9 starts again on a full disk through its replicas' open lock, refuses new requests, and serves once space returns", { skip }, async (t) => {
  const closeFirst: Array<() => unknown> = [];
  const dir = mountSmallDisk(t, '1m', closeFirst);
  const crashed = spawnSync(process.execPath, ['--import', 'tsx', CRASH_CHILD, dir], { stdio: 'inherit' });
  t.equal(crashed.signal, 'SIGKILL', 'the first run was killed -9 with a request open');
  const filler = fillDisk(dir);

  const restarted = await openNodeSpool({ stateDir: dir, nodeId: NODE_ID, holder: ConfigHolder.notReady('test'), logger: quietLogger(), synchronous: 'normal', replicas: 1 });
  closeFirst.unshift(() => restarted.close());
  expectSpoolFull(t, () => restarted.spool.open(openRow('new-while-full')));
  rmSync(filler);
  await waitFor(() => restarted.state()?.writeFailing === null, { what: 'the spool to write again once space returned' });
  await restarted.spool.open(openRow('new-after-space-returned'));
  t.pass('new requests are accepted again');
});
