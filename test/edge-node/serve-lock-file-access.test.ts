// A lock file beside the spool that node-edge cannot open — root's after one `sudo zenova-node
// serve`, or a directory at its path — stops `serve` with one line naming the file, its owner and the
// chown (or what to do about the directory), exit 2, not "unexpected failure: unable to open database
// file" and exit 1. One of its own user at a mode that forbids it is made 0600, as spool.db is.
// Needs root: the files are made as root and serve runs as the node's user (uid 65534).
import { chmodSync, chownSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import { giveToNodeUser, NEEDS_ROOT, NODE_USER, serveAsNodeUser } from './node-user-serve.js';

/** The locks serve opens at every start: spool.db's open lock, the first owner slot, and the sole-process lock (ZENOVA_NODE_REPLICAS=1). */
const LOCK_FILES = ['spool.db.lock', 'spool-owner-0.lock', 'spool-owner-sole.lock'];

/** An enrolled state dir of the node's user, with `plant` run on the lock file's path first. */
async function stateWith(t: Test, name: string, plant: (file: string) => void): Promise<{ dir: string; file: string }> {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway);
  const file = path.join(state.dir, name);
  plant(file);
  giveToNodeUser(state.dir);
  return { dir: state.dir, file };
}

for (const name of LOCK_FILES) {
  t.test(`serve refuses a ${name} root owns with one line naming it, its owner and the chown, exit 2`, { skip: NEEDS_ROOT }, async (t) => {
    const { dir, file } = await stateWith(t, name, (f) => writeFileSync(f, '', { mode: 0o600 }));
    // Left root's, as `sudo zenova-node serve` leaves it (node-edge makes its lock files 0600).
    chownSync(file, 0, 0);
    const result = await serveAsNodeUser(dir);
    t.equal(result.code, 2, `exit 2${result.code === 2 ? '' : `: ${result.output}`}`);
    t.equal(result.said.length, 1, 'one line');
    t.equal(
      result.said[0],
      `zenova-node: ${file}: permission denied: it belongs to uid 0, and node-edge runs as uid ${NODE_USER}; run node-edge as uid 0 if that is the node's user; ` +
        `else give the file to the node's user (a command run as root may have left it): chown ${NODE_USER} ${file}`,
    );
    t.notMatch(result.output, /unexpected failure|unable to open database file/);
    t.equal(statSync(file).uid, 0, 'the file was left as it was');
  });

  t.test(`serve refuses a directory at ${name} with one line naming it and what to do, exit 2`, { skip: NEEDS_ROOT }, async (t) => {
    const { dir, file } = await stateWith(t, name, (f) => mkdirSync(f));
    const result = await serveAsNodeUser(dir);
    t.equal(result.code, 2, `exit 2${result.code === 2 ? '' : `: ${result.output}`}`);
    t.equal(result.said.length, 1, 'one line');
    t.equal(
      result.said[0],
      `zenova-node: ${file}: is a directory, not a lock file; move it aside (no node-edge can hold a lock on a directory): node-edge creates the lock file again`,
    );
    t.notMatch(result.output, /unexpected failure/);
  });

  t.test(`serve makes a ${name} of its own user at mode 000 owner-only and starts`, { skip: NEEDS_ROOT }, async (t) => {
    const { dir, file } = await stateWith(t, name, (f) => writeFileSync(f, ''));
    chmodSync(file, 0o000);
    const result = await serveAsNodeUser(dir);
    t.ok(result.listened, `serve started${result.listened ? '' : `: ${result.output}`}`);
    t.equal(result.code, 0, 'and stopped cleanly');
    t.equal(statSync(file).mode & 0o777, 0o600, 'the lock file is 0600');
  });
}
