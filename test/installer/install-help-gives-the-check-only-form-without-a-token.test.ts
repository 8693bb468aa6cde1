/**
 * `zenova install node --help` gives the --check-only form on a usage line of its own, without a
 * token (a check-only run needs none), as docs/install.md's first usage line does; the token form
 * follows it, and --check-only is no longer an option of that form.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { runInstall } from '../../installer/src/commands/install.js';
import { captureCli, hostEnv } from './fake-host.js';

/** The usage forms: each `zenova install node …` line with the indented lines that continue it. */
function forms(text: string): string[] {
  const out: string[] = [];
  for (const line of text.split('\n')) {
    const start = /(?:^|\s)(?:sudo \.\/)?zenova install node (.*)$/.exec(line);
    if (start !== null && /^(Usage: | {7}|sudo )/.test(line)) out.push(start[1]!);
    else if (out.length > 0 && /^ {20,}\[?--/.test(line)) out[out.length - 1] += ` ${line.trim()}`;
    else if (out.length > 0 && line.trim() === '') break;
  }
  return out;
}

t.test('the help gives a --check-only usage line without a token, then the token form without --check-only', async (t) => {
  const cli = captureCli(process.cwd());
  t.equal(await runInstall(['node', '--help'], cli.ctx, hostEnv('/nonexistent-root')), 0);
  const help = forms(cli.out());
  t.equal(help.length, 2, cli.out());
  t.match(help[0], /--package FILE --control-plane URL .*--check-only/);
  t.notMatch(help[0], /--token/, 'the check-only form asks for no token');
  t.match(help[1], /\(--token T \| --token-file F\)/);
  t.notMatch(help[1], /--check-only/, 'the token form is the install itself');
});

t.test('docs/install.md starts with the same check-only form', async (t) => {
  const doc = forms(readFileSync(new URL('../../docs/install.md', import.meta.url), 'utf8'));
  t.match(doc[0], /--check-only/);
  t.notMatch(doc[0], /--token/);
});
