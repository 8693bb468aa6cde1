// Replicas of a node (ZENOVA_NODE_REPLICAS > 1) share spool.db, and one starts (or `status` runs)
// while another writes it. The WAL check (wal-file-check.ts) is for what a crash leaves with no
// writer running: it must never take a WAL being written and checkpointed meanwhile for a damaged
// one. A walk that read the header before the writer started the WAL again and its frames after saw
// a "damaged frame 1 followed by committed transactions" and refused a healthy spool.
import path from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import t from 'tap';
import { findWalDamage } from '../../../edge-node/src/spool/wal-file-check.js';
import { startReplica, tempStateDir } from './spool-helpers.js';

const CHECKS = 300;

t.test('a WAL another process writes and checkpoints meanwhile is never taken for a damaged one', async (t) => {
  const file = path.join(tempStateDir(t), 'spool.db');
  const writer = await startReplica(t, file, 'write');
  const refusals: string[] = [];
  for (let check = 0; check < CHECKS; check++) {
    const damage = findWalDamage(`${file}-wal`);
    if (damage !== null) refusals.push(damage);
    await nextTurn();
  }
  await writer.stop();
  t.same(refusals.slice(0, 3), [], `no refusal in ${CHECKS} checks (${refusals.length} refused)`);
});
