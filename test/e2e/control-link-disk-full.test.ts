/**
 * A single node-edge whose state dir's disk fills up keeps its control link: the lock it cannot
 * renew cannot be taken by any other process either, so it neither drops the link nor blames
 * another process; heartbeats reach the control plane and /readyz stays true to the link. The disk
 * is a real tmpfs filled to ENOSPC (root only; skipped where mount is not permitted).
 */
import { rmSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { fillDisk, mountSmallDisk, tmpfsSkip } from '../fixtures/small-disk.js';
import { DEFAULT_LOCK_TTL_MS } from '../../edge-node/src/control/control-link-lock.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { testDatabase } from '../fixtures/postgres.js';
import { parseJsonLines } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { configureDemo, enrollNewNode, freePort, httpsMaterial, nodeView, startControlPlane, startNodeServe, tempDir } from './stack.js';

t.test('a single node whose state dir disk is full keeps its control link past the lock TTL', { skip: tmpfsSkip(), timeout: 180_000 }, async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-link-full-');
  const https = await httpsMaterial(path.join(work, 'https'));
  const cp = await startControlPlane(t, { db, https, gatewayTlsDir: path.join(work, 'gw'), gatewayPort: await freePort(), listenPort: await freePort(), env: { ZENOVA_NODE_OFFLINE_AFTER_SECONDS: '5' } });
  const upstream = await startFakeUpstream(t);
  await configureDemo(cp, upstream.url);
  // Unmounted lazily: the node may still hold files there when the test ends.
  const stateDir = mountSmallDisk(t, '24m');
  await enrollNewNode(t, cp, 'link-full', stateDir);
  const node = await startNodeServe(t, { stateDir });
  await node.proc.waitForLine(/"msg":"config applied"/, 30_000);

  const filler = fillDisk(stateDir);
  const lines = () => parseJsonLines(node.proc.output());
  const failure = await waitFor(() => lines().find((l) => l.code === 'STATE_DIR_FULL' || l.msg === 'could not renew the control link lock'), { what: 'the lock renew to fail', timeoutMs: 15_000 });
  const failedAt = Date.parse(String(failure.time));
  // Past the TTL after which the lock counts as stale, plus a lock interval: the old give-up point.
  await waitFor(() => Date.now() - failedAt > DEFAULT_LOCK_TTL_MS + 3_000, { what: 'the lock TTL to pass on a full disk', timeoutMs: 30_000, intervalMs: 250 });

  t.match(failure, { code: 'STATE_DIR_FULL', level: 50, stateDir, msg: /disk is full/ }, 'the real cause is logged, naming the state dir');
  t.notOk(lines().some((l) => l.msg === 'another node-edge process holds the control link now; this one stops its link and follows'), 'no other process is blamed');
  const ready = (await (await fetch(`${node.url}/readyz`)).json()) as { controlPlane: { connected: boolean } };
  t.equal(ready.controlPlane.connected, true, '/readyz: the link is up');
  const lastHeartbeat = await waitFor(async () => {
    const view = await nodeView(cp, 'link-full');
    return view.lastHeartbeatAt !== null && Date.parse(view.lastHeartbeatAt) > Date.now() - 2_000 ? view : undefined;
  }, { what: 'a recent heartbeat', timeoutMs: 5_000 });
  t.equal(lastHeartbeat.status, 'online', 'the control plane still hears the node');

  rmSync(filler);
  await waitFor(() => lines().find((l) => l.msg === 'the control link lock can be renewed again'), { what: 'the renew to work again', timeoutMs: 15_000 });
  t.equal(lines().filter((l) => l.msg === 'control session established').length, 1, 'one session throughout');
});
