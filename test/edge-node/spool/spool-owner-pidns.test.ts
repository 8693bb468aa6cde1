// A node run in a container gets a new pid namespace at every (re)start, so the pid an open row
// names means nothing to the next run. Open rows name an owner slot instead (spool-owner-lock.ts),
// whose kernel lock dies with its process in whatever namespace it ran: at the first start after a
// kill -9 its rows become interrupted records, while a live replica's rows are still left to it.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { NODE_ID, quietLogger, spoolState, tempStateDir } from './spool-helpers.js';

const limits = () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' as const });
const CHILD = fileURLToPath(new URL('./spool-open-row-child.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

const canUnshare = spawnSync('unshare', ['-p', '-f', '--mount-proc', 'true'], { stdio: 'ignore' }).status === 0;

/** A node-edge stand-in in a new pid namespace (it is pid 1 there), serving one open request. */
async function serveInNewPidNs(t: { teardown(fn: () => unknown): void; equal(found: unknown, wanted: unknown, message: string): unknown }, file: string, id: string): Promise<{ kill(): Promise<void> }> {
  const unshare = spawn('unshare', ['-p', '-f', '--mount-proc', '--kill-child', process.execPath, '--expose-gc', '--import', 'tsx', CHILD, file, id], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
  const exited = new Promise<void>((resolve) => unshare.once('exit', () => resolve()));
  t.teardown(() => unshare.kill('SIGKILL'));
  const ready = path.join(path.dirname(file), `ready-${id}`);
  await waitFor(() => existsSync(ready) || unshare.exitCode !== null, { what: `the child to open ${id}`, timeoutMs: 60_000 });
  if (!existsSync(ready)) throw new Error(`the child exited (${unshare.exitCode}) before opening its row`);
  t.equal(readFileSync(ready, 'utf8'), '1', 'the child is pid 1 of its own pid namespace');
  // Its pid here: the child unshare forked. A pid 1 ignores SIGKILL from inside its namespace, not from here.
  const hostPid = Number(readFileSync(`/proc/${unshare.pid}/task/${unshare.pid}/children`, 'utf8').trim());
  return {
    async kill() {
      process.kill(hostPid, 'SIGKILL');
      // unshare exits once it reaped the child: the process and its locks are gone.
      await exited;
    },
  };
}

function start(file: string, meta: ReturnType<typeof createSpoolFile>): SpoolStore {
  return new SpoolStore({ file, meta, logger: quietLogger(), limits });
}

t.test('an open row left by a node killed -9 in another pid namespace becomes an interrupted record at the first restart', { skip: canUnshare ? false : 'needs unshare -p (root)' }, async (t) => {
  const file = path.join(tempStateDir(t), 'spool.db');
  const meta = createSpoolFile(file, NODE_ID);
  const node = await serveInNewPidNs(t, file, 'req-crashed');
  t.same(spoolState(file).open, ['req-crashed'], 'the request is open while the node serves it');
  await node.kill();

  const restarted = start(file, meta);
  t.teardown(() => restarted.close());
  t.same(spoolState(file), { open: [], records: [{ id: 'req-crashed', status: 'interrupted', reservedMicros: 1500 }] }, 'one interrupted record, with its reservation, and no open row');
});

t.test("a live replica's open row in another pid namespace is left to it, and recovered at the first start after it died", { skip: canUnshare ? false : 'needs unshare -p (root)' }, async (t) => {
  const file = path.join(tempStateDir(t), 'spool.db');
  const meta = createSpoolFile(file, NODE_ID);
  const replica = await serveInNewPidNs(t, file, 'req-in-flight');

  const second = start(file, meta);
  t.same(spoolState(file), { open: ['req-in-flight'], records: [] }, "a replica starting beside it leaves the live replica's request open");
  await second.close();

  await replica.kill();
  const third = start(file, meta);
  t.teardown(() => third.close());
  t.same(spoolState(file), { open: [], records: [{ id: 'req-in-flight', status: 'interrupted', reservedMicros: 1500 }] }, 'once that replica is gone, its row is an interrupted record');
});
