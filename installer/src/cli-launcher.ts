/**
 * How the operator runs this CLI, for advice printed after a failed first install: its rollback
 * removes /usr/local/bin/zenova, so `zenova …` no longer runs, but the launcher the operator
 * started still does. The launchers (packaging/release-contents.ts) sit beside the bundled CLI's
 * `app/installer/`: `zenova` at the top of the installer tarball, `bin/zenova` in a release.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { shellQuote } from './format/shell-quote.js';

const PLAIN_WORD = /^[A-Za-z0-9_./+-]+$/;

/**
 * `bundleUrl` is the running bundle's import.meta.url (`<root>/app/installer/zenova.mjs`); the
 * launcher as `./zenova` when it is in `cwd`, else by its full path; undefined when there is none
 * (run from the source tree).
 */
export function launcherCommand(bundleUrl: string, cwd: string, exists: (file: string) => boolean = existsSync): string | undefined {
  const root = fileURLToPath(new URL('../../', bundleUrl));
  const launcher = [path.join(root, 'zenova'), path.join(root, 'bin', 'zenova')].find((file) => exists(file));
  if (launcher === undefined) return undefined;
  const word = path.dirname(launcher) === path.resolve(cwd) ? `./${path.basename(launcher)}` : launcher;
  return PLAIN_WORD.test(word) ? word : shellQuote(word);
}
