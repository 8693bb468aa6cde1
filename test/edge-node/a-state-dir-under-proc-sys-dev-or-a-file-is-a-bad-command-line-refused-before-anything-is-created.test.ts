/**
 * A --state-dir that can never be one is a bad command line (exit 2) said in one line before any
 * mkdir and before anything is sent: under /proc (where Node's recursive mkdir never returns, so
 * enroll hung), /sys or /dev, also through a symbolic link; or a regular file, or a path under one
 * (enroll said "enrollment failed", exit 1). serve (openStateStore) refuses the same paths.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { tsEntry } from '../fixtures/processes.js';
import { closedPort } from '../fixtures/loopback-server.js';
import { runNodeCli } from './cli-capture.js';

const TOKEN = 'zn_it_U3RhdGVEaXJVbmRlclByb2NJc1JlZnVzZWQwMTIzNDU2Nzg5';

/**
 * `zenova-node enroll` as a child process: without the check it never returns under /proc, so a
 * deadline ends it (and the test then fails on its exit status) instead of holding the run.
 */
function enrollChild(controlPlane: string, stateDir: string): { code: number | null; stderr: string } {
  const entry = tsEntry('edge-node/src/main.ts');
  const child = spawnSync(entry.command, [...entry.args, 'enroll', '--control-plane', controlPlane, '--token', TOKEN, '--state-dir', stateDir], {
    encoding: 'utf8',
    timeout: 60_000,
    killSignal: 'SIGKILL',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (child.error !== undefined && (child.error as NodeJS.ErrnoException).code !== 'ETIMEDOUT') throw child.error;
  return { code: child.status, stderr: child.stderr };
}

t.test('enroll --state-dir under /proc, /sys or /dev is refused at once, exit 2, nothing created or sent', async (t) => {
  const controlPlane = `https://127.0.0.1:${await closedPort()}`;
  const cases: Array<[string, string]> = [
    ['/proc/zenova-no-such/sub', 'must not be under /proc (a kernel pseudo filesystem, not a real disk)'],
    ['/sys/zenova-no-such', 'must not be under /sys (a kernel pseudo filesystem, not a real disk)'],
    ['/dev/shm/zenova-no-such', 'must not be under /dev (device files and /dev/shm, a tmpfs: not a real disk)'],
  ];
  for (const [stateDir, rule] of cases) {
    const run = enrollChild(controlPlane, stateDir);
    t.equal(run.code, 2, `${stateDir}: exit 2 (${run.stderr})`);
    t.equal(
      run.stderr,
      `zenova-node: --state-dir ${stateDir} ${rule}: nothing was sent; pass --state-dir with a directory on a real disk, or a path where one can be created\n`,
      stateDir,
    );
    t.notOk(existsSync(stateDir), `${stateDir}: not created`);
  }
});

t.test('enroll --state-dir through a symbolic link into /proc is refused the same way, exit 2', async (t) => {
  const dir = t.testdir({});
  const link = path.join(dir, 'to-proc');
  symlinkSync('/proc', link);
  const stateDir = path.join(link, 'zenova-no-such', 'sub');
  const run = enrollChild(`https://127.0.0.1:${await closedPort()}`, stateDir);
  t.equal(run.code, 2, run.stderr);
  t.match(run.stderr, `zenova-node: --state-dir ${stateDir} must not be under /proc (a kernel pseudo filesystem, not a real disk) (${link} leads to /proc): nothing was sent`);
});

t.test('enroll --state-dir naming a regular file, or a path under one, is a bad command line (exit 2), not a failed enrollment', async (t) => {
  const dir = t.testdir({});
  const file = path.join(dir, 'a-file');
  writeFileSync(file, 'not a dir\n');
  const controlPlane = `https://127.0.0.1:${await closedPort()}`;
  const onFile = await runNodeCli(['enroll', '--control-plane', controlPlane, '--token', TOKEN, '--state-dir', file]);
  t.equal(onFile.code, 2, onFile.stderr);
  t.equal(onFile.stderr, `zenova-node: --state-dir ${file} is not a directory: nothing was sent; pass --state-dir with a directory on a real disk, or a path where one can be created\n`);
  const under = path.join(file, 'sub', 'state');
  const underFile = await runNodeCli(['enroll', '--control-plane', controlPlane, '--token', TOKEN, '--state-dir', under]);
  t.equal(underFile.code, 2, underFile.stderr);
  t.equal(underFile.stderr, `zenova-node: --state-dir ${under} is under ${file}, which is a file, not a directory: nothing was sent; pass --state-dir with a directory on a real disk, or a path where one can be created\n`);
  t.notMatch(onFile.stderr + underFile.stderr, /enrollment failed/);
});

t.test('serve --state-dir under /proc says it must not be there, exit 2, not that it does not exist', async (t) => {
  const result = await runNodeCli(['serve', '--state-dir', '/proc/zenova-no-such', '--listen', '127.0.0.1:0']);
  t.equal(result.code, 2, result.stderr);
  t.equal(result.stderr, 'zenova-node: /proc/zenova-no-such: must not be under /proc (a kernel pseudo filesystem, not a real disk)\n');
});

t.test('status --state-dir under /proc is a bad command line (exit 2), not a node that is not enrolled', async (t) => {
  const result = await runNodeCli(['status', '--state-dir', '/proc/zenova-no-such']);
  t.equal(result.code, 2, result.stderr);
  t.equal(result.stderr, "zenova-node: /proc/zenova-no-such: must not be under /proc (a kernel pseudo filesystem, not a real disk); pass --state-dir with the node's state directory\n");
});

t.test('doctor --state-dir under /dev fails its state dir check without advice to enroll there', async (t) => {
  const result = await runNodeCli(['doctor', '--state-dir', '/dev/zenova-no-such']);
  t.equal(result.code, 1, result.stdout);
  t.match(result.stdout, /must not be under \/dev .*; pass --state-dir with the node's state directory/);
  t.notMatch(result.stdout, /enroll with/, 'enroll refuses such a dir: doctor does not advise it');
});

t.test('serve --replicas 2 --state-dir under /proc says it once, before starting any replica, exit 2', async (t) => {
  const entry = tsEntry('edge-node/src/main.ts');
  const child = spawnSync(entry.command, [...entry.args, 'serve', '--replicas', '2', '--state-dir', '/proc/zenova-no-such', '--listen', '127.0.0.1:0'], {
    encoding: 'utf8',
    timeout: 60_000,
    killSignal: 'SIGKILL',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.equal(child.status, 2, child.stderr);
  const said = `${child.stdout}${child.stderr}`.split('\n').filter((line) => line.includes('must not be under /proc'));
  t.equal(said.length, 1, `one line, not one per replica: ${child.stderr}`);
  t.notMatch(child.stdout, /replica/, 'no replica was started');
});
