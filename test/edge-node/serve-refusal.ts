// `zenova-node serve` started on a state dir it is expected to refuse: whether it got as far as
// listening, and, when it did not, its exit code and its own lines on stderr.
import type { Test } from 'tap';
import { startProcess, tsEntry } from '../fixtures/processes.js';

export interface ServeRefusal {
  listened: boolean;
  /** Its exit code; null when it listened (the process harness stops it at the test's end). */
  code: number | null;
  /** Its own lines (`zenova-node: …`). */
  said: string[];
  output: string;
}

export async function serveRefusal(t: Test, stateDir: string): Promise<ServeRefusal> {
  const entry = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({ name: 'zenova-node serve', command: entry.command, args: [...entry.args, 'serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0'], t });
  // Resolves false once serve exits without listening (waitForLine gives up at its exit).
  const listened = await proc.waitForLine(/node-edge listening/, 60_000).then(() => true, () => false);
  if (listened) return { listened, code: null, said: [], output: proc.output() };
  const exit = await proc.exited;
  const output = proc.output();
  return { listened, code: exit.code, said: output.split('\n').filter((l) => l.startsWith('zenova-node: ')), output };
}
