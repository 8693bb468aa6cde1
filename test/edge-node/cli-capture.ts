// `zenova-node <argv>` run in process (runCli) with its output captured, for the CLI tests.
import { spawnSync } from 'node:child_process';
import { chmod } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { runCli } from '../../edge-node/src/cli/run-cli.js';

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

export async function runNodeCli(argv: string[]): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(argv, { stdout: { write: (s: string) => (stdout += s) }, stderr: { write: (s: string) => (stderr += s) } });
  return { code, stdout, stderr };
}

/**
 * `zenova-node <argv>` run as a user other than the owner of `dir` (a state dir, 0700): as root
 * (CI), a child process as nobody; otherwise this process with `dir` given `modeForOthers` for
 * the run (what another user could do with it).
 */
export async function runNodeCliAsAnotherUser(t: { teardown(fn: () => unknown): void }, dir: string, modeForOthers: number, argv: string[]): Promise<CliRun> {
  if (process.getuid?.() !== 0) {
    await chmod(dir, modeForOthers);
    t.teardown(() => chmod(dir, 0o700));
    try {
      return await runNodeCli(argv);
    } finally {
      await chmod(dir, 0o700);
    }
  }
  await chmod(dir, 0o700 | (modeForOthers & 0o007));
  t.teardown(() => chmod(dir, 0o700));
  const main = fileURLToPath(new URL('../../edge-node/src/main.ts', import.meta.url));
  const child = spawnSync(process.execPath, ['--import', 'tsx', main, ...argv], { uid: 65534, gid: 65534, encoding: 'utf8', env: { ...process.env, HOME: '/tmp' } });
  if (child.error !== undefined) throw child.error;
  await chmod(dir, 0o700);
  return { code: child.status ?? -1, stdout: child.stdout, stderr: child.stderr };
}
