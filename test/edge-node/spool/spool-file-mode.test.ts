// spool.db holds prompts and answers: it and its -wal/-shm are owner-only (0600) like every other
// state file, also in a state dir others may read (an existing dir, a container volume), and a
// spool an older release left at the umask's 0644 is made owner-only at the next start.
import { chmodSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { spoolOwnerLockFile } from '../../../edge-node/src/spool/spool-owner-lock.js';
import { modeOf, readableStateDir } from '../state-file-modes.js';
import { NODE_ID, quietLogger, record } from './spool-helpers.js';

function open(dir: string) {
  return openNodeSpool({ stateDir: dir, nodeId: NODE_ID, holder: { current: () => ({ ready: false }) } as never, logger: quietLogger(), synchronous: 'normal' });
}

t.test('a new spool, its -wal and -shm and its owner slot are created owner-only in a state dir others can read', async (t) => {
  const dir = readableStateDir(t);
  const previous = process.umask(0o022);
  t.teardown(() => process.umask(previous));
  const node = await open(dir);
  t.teardown(() => node.close());
  await node.spool.finalise(record('req-1'));
  const file = path.join(dir, 'spool.db');
  t.same(
    [modeOf(file), modeOf(`${file}-wal`), modeOf(`${file}-shm`), modeOf(spoolOwnerLockFile(file, 0))],
    ['600', '600', '600', '600'],
    'spool.db, spool.db-wal, spool.db-shm, spool-owner-0.lock',
  );
});

t.test('a spool an older release left readable by others is made owner-only when the node starts', async (t) => {
  const dir = readableStateDir(t);
  const first = await open(dir);
  await first.spool.finalise(record('req-1'));
  await first.close();
  const file = path.join(dir, 'spool.db');
  // As an older release left it: every file at 0644, sidecars included.
  for (const f of [file, `${file}-wal`, `${file}-shm`]) {
    writeFileSync(f, '', { flag: 'a' }); // created when missing, never truncated
    chmodSync(f, 0o644);
  }

  const second = await open(dir);
  t.teardown(() => second.close());
  t.same([modeOf(file), modeOf(`${file}-wal`), modeOf(`${file}-shm`)], ['600', '600', '600']);
  t.equal(second.figures().backfillBacklog, 1, 'the spool itself is untouched');
});
