// What the tests of state file modes share: a state dir others may read, so that a file's own mode
// (not the dir's) is what keeps it private, and a file's permission bits as `ls` writes them.
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** A state dir others may read (an existing dir, a container volume), removed when the test ends. */
export function readableStateDir(t: { teardown(fn: () => unknown): void }): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-readable-state-'));
  chmodSync(dir, 0o755);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** The file's permission bits in octal, e.g. '600'. */
export function modeOf(file: string): string {
  return (statSync(file).mode & 0o777).toString(8);
}
