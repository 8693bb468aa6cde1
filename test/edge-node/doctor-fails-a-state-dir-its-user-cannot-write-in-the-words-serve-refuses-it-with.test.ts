/**
 * A state dir the node's user may read but not write (its own dir at mode 0500): serve refuses it
 * (`cannot be written (permission denied)`, exit 2), so doctor fails its state-dir check with the
 * same words (exit 1) instead of `ok state dir … (mode 0500)` and `all checks passed`. As root (CI)
 * the dir and its files are given to uid 65534 and both commands run as that uid (root may write
 * any dir); otherwise this user's own dir is made 0500.
 */
import { spawn } from 'node:child_process';
import { chmod } from 'node:fs/promises';
import t from 'tap';
import { tsEntry } from '../fixtures/processes.js';
import { runNodeCli } from './cli-capture.js';
import type { CliRun } from './cli-capture.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import { NODE_USER, giveToNodeUser } from './node-user-serve.js';

const AS_ROOT = process.getuid?.() === 0;

/**
 * `zenova-node <argv>` as the dir's owner: uid 65534 when this runs as root, else this process. Not
 * spawnSync: doctor's gateway probe needs this process's fake gateway to answer meanwhile.
 */
async function runAsOwner(argv: string[]): Promise<CliRun> {
  if (!AS_ROOT) return runNodeCli(argv);
  const entry = tsEntry('edge-node/src/main.ts');
  const child = spawn(entry.command, [...entry.args, ...argv], { uid: NODE_USER, gid: NODE_USER, env: { PATH: process.env.PATH ?? '', HOME: '/tmp' } });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const deadline = setTimeout(() => child.kill('SIGKILL'), 60_000);
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', resolve);
  }).finally(() => clearTimeout(deadline));
  return { code: code ?? -1, stdout, stderr };
}

t.test('doctor fails a state dir of mode 0500 with the line serve refuses it with, exit 1', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  if (AS_ROOT) giveToNodeUser(state.dir);
  await chmod(state.dir, 0o500);
  t.teardown(() => chmod(state.dir, 0o700));

  const unwritable = `${state.dir}: cannot be written (permission denied); node-edge keeps its request spool, config cache and status there: run it as the user that owns the state dir`;
  const serve = await runAsOwner(['serve', '--state-dir', state.dir, '--listen', '127.0.0.1:0']);
  t.equal(serve.code, 2, serve.stderr);
  t.match(serve.stderr, `zenova-node: ${unwritable}`, 'serve refuses it');

  const doctor = await runAsOwner(['doctor', '--state-dir', state.dir]);
  t.equal(doctor.code, 1, doctor.stdout + doctor.stderr);
  t.match(doctor.stdout, `FAIL  state dir ${state.dir} (mode 0500)\n      \`serve\` refuses to start: ${unwritable}`, 'doctor fails it in the same words');
  t.notMatch(doctor.stdout, /all checks passed|ok\s+state dir/);
  t.match(doctor.stdout, /^1 check failed$/m, 'the rest of the node is healthy');
});
