// `zenova-node status` shows the spool's size and its undelivered backlog, read from the file.
import t from 'tap';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { openStateStore } from '../../../edge-node/src/state/state-store.js';
import { formatNodeStatus, readNodeStatus } from '../../../edge-node/src/status/node-status.js';
import { NODE_ID, openRow, quietLogger, record, tempStateDir } from './spool-helpers.js';

t.test('status reports the spool bytes, the backlog not yet delivered and the open requests', async (t) => {
  const dir = tempStateDir(t);
  const store = await openStateStore(dir, { create: false });
  t.equal((await readNodeStatus(store)).spool, null, 'no spool yet');

  const spool = await openNodeSpool({ stateDir: dir, nodeId: NODE_ID, holder: ConfigHolder.notReady('x'), logger: quietLogger(), synchronous: 'normal' });
  t.teardown(() => spool.close());
  void spool.spool.open(openRow('still-open'));
  await spool.spool.finalise(record('done-1'));
  await spool.spool.finalise(record('done-2'));

  const report = await readNodeStatus(store);
  t.match(report.spool, { backlog: 2, open: 1, error: null });
  t.ok((report.spool?.bytes ?? 0) > 0, 'bytes counted');
  const text = formatNodeStatus({
    ...report,
    enrolled: true,
    node: { id: NODE_ID, name: 'edge', enrolledAt: '2026-11-29T00:00:00Z' },
  });
  t.match(text, /spool:\s+\d+(\.\d)? (B|KiB|MiB), backlog 2 records not yet delivered, 1 open/);
});
