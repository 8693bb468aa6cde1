// A spool.db the node's user may not read or chmod (left by a command run as root) stops `serve`
// with the spool refusal, naming the file, its owner and what to do (exit 2), not a raw EACCES or
// EPERM and exit 1; `status` and `doctor` say the same. Needs root: the files are made as root and
// the commands run as an unprivileged uid (65534), as the node's user.
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import type { Test } from 'tap';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { startFakeGateway, writeEnrolledState } from '../control-fixtures.js';
import { openRow, quietLogger, record } from './spool-helpers.js';

const NODE_USER = 65534;
const MAIN = fileURLToPath(new URL('../../../edge-node/src/main.ts', import.meta.url));
const skip = process.getuid?.() !== 0 ? 'needs root (files of another owner)' : false;

/**
 * An enrolled state dir with a spool (one record), all of it the node user's but the files named in
 * `rootOwned`, which root keeps with `mode`.
 */
async function stateWithRootOwned(t: Test, rootOwned: string[], mode: number): Promise<{ dir: string; file: string }> {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway);
  const node = await openNodeSpool({ stateDir: state.dir, nodeId: state.identity.nodeId, holder: ConfigHolder.notReady('x'), logger: quietLogger(), synchronous: 'normal' });
  void node.spool.open(openRow('r1'));
  await node.spool.finalise(record('r1'));
  await node.close();
  for (const name of readdirSync(state.dir)) {
    const f = path.join(state.dir, name);
    if (rootOwned.includes(name)) {
      chownSync(f, 0, 0);
      chmodSync(f, mode);
    } else chownSync(f, NODE_USER, NODE_USER);
  }
  chownSync(state.dir, NODE_USER, NODE_USER);
  return { dir: state.dir, file: path.join(state.dir, 'spool.db') };
}

/**
 * `zenova-node <argv>` as the node's user. `said`: its own lines on stderr (tap's process hook in
 * the child adds a stack of its own there, failing to write tap's dirs as this user).
 */
function runAsNodeUser(argv: string[]): { code: number | null; output: string; said: string[] } {
  const child = spawnSync(process.execPath, ['--import', 'tsx', MAIN, ...argv], { uid: NODE_USER, gid: NODE_USER, encoding: 'utf8', timeout: 60_000, env: { PATH: process.env.PATH ?? '', HOME: '/tmp' } });
  if (child.error !== undefined) throw child.error;
  return { code: child.status, output: child.stdout + child.stderr, said: child.stderr.split('\n').filter((l) => l.startsWith('zenova-node: ')) };
}

for (const mode of [0o600, 0o644]) {
  const octal = mode.toString(8).padStart(3, '0');
  t.test(`serve refuses a spool.db root owns at ${octal} with a line naming the file, its owner and what to do, exit 2`, { skip }, async (t) => {
    const { dir, file } = await stateWithRootOwned(t, ['spool.db'], mode);
    const result = runAsNodeUser(['serve', '--state-dir', dir, '--listen', '127.0.0.1:0']);
    t.equal(result.code, 2, `exit 2${result.code === 2 ? '' : `: ${result.output}`}`);
    t.equal(result.said.length, 1, 'one line');
    t.match(result.said[0], `zenova-node: ${file}: permission denied: it belongs to uid 0, and node-edge runs as uid ${NODE_USER}`);
    t.match(result.said[0], `run node-edge as uid 0 if that is the node's user; else give the file to the node's user (a command run as root may have left it): chown ${NODE_USER} ${file}`);
    t.equal(statSync(file).mode & 0o777, mode, 'the file was left as it was');
  });
}

t.test('serve refuses a spool.db-wal root owns the same way, naming that file', { skip }, async (t) => {
  const { dir, file } = await stateWithRootOwned(t, [], 0o600);
  // A -wal a kill -9 left (a clean close removes it), then made root's (copied back as root from a
  // backup, say; SQLite run as root gives the sidecars it creates spool.db's owner itself).
  const sqlite = fileURLToPath(import.meta.resolve('better-sqlite3'));
  const script = `const D = require(${JSON.stringify(sqlite)}); const db = new D(${JSON.stringify(file)}); db.pragma('journal_mode = WAL');
    db.pragma('wal_autocheckpoint = 0'); db.prepare("insert into meta (key, value) values ('probe', '1')").run(); process.kill(process.pid, 'SIGKILL');`;
  spawnSync(process.execPath, ['-e', script]);
  const wal = `${file}-wal`;
  chownSync(wal, 0, 0);
  chmodSync(wal, 0o600);
  t.ok(statSync(wal).size > 0, 'a non-empty -wal, root\'s');
  const result = runAsNodeUser(['serve', '--state-dir', dir, '--listen', '127.0.0.1:0']);
  t.equal(result.code, 2, `exit 2${result.code === 2 ? '' : `: ${result.output}`}`);
  t.equal(result.said.length, 1, 'one line');
  t.match(result.said[0], `zenova-node: ${wal}: permission denied: it belongs to uid 0, and node-edge runs as uid ${NODE_USER}`);
  t.match(result.said[0], `chown ${NODE_USER} ${wal}`);
});

t.test('status run as the node user says the spool is unreadable for permission, naming its owner', { skip }, async (t) => {
  const { dir, file } = await stateWithRootOwned(t, ['spool.db'], 0o600);
  const result = runAsNodeUser(['status', '--state-dir', dir]);
  t.match(result.output, `UNREADABLE: ${file}: permission denied (owned by uid 0), and this runs as uid ${NODE_USER}`);
  t.match(result.output, `give the file to it (chown ${NODE_USER} ${file})`);
  t.notMatch(result.output, /unable to open database file/);
});

t.test('doctor run as the node user fails the spool check with serve\'s refusal for a spool.db root owns at 644', { skip }, async (t) => {
  const { dir, file } = await stateWithRootOwned(t, ['spool.db'], 0o644);
  const result = runAsNodeUser(['doctor', '--state-dir', dir]);
  t.match(result.output, /FAIL\s+request spool .*spool\.db\n\s+`serve` refuses to start with it: /);
  t.match(result.output, `${file}: permission denied: it belongs to uid 0, and node-edge runs as uid ${NODE_USER}`);
});
