// `zenova-node <argv>` run in process (runCli) with its output captured, for the CLI tests.
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
