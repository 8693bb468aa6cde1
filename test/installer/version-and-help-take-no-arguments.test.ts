/**
 * `zenova --version`, `zenova --help`, `-h` and `zenova help` take no more words: a word after them
 * (`zenova --version <TOKEN>`, a token pasted in the wrong place) is the stray-argument usage error
 * the commands give, exit 2, saying where it was and never what it was (an option-shaped word is
 * named). Alone they still print the release and the usage, exit 0.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MAIN_USAGE, runCli } from '../../installer/src/cli.js';
import { productVersion } from '../../proto/src/product-version.js';
import { captureCli } from './fake-host.js';

const work = mkdtempSync(join(tmpdir(), 'zn-version-help-words-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const TOKEN = 'zn_it_VmVyc2lvbkFyZ3VtZW50VG9rZW4.NeverShown7';
/** An admin token as `openssl rand -hex 16` makes it: shaped like a command word. */
const HEX_TOKEN = 'c0ffee5d8a9b4e21f3a7d6b0e19c4a2f';

async function run(...argv: string[]): Promise<{ exit: number; out: string; err: string }> {
  const cli = captureCli(work);
  const exit = await runCli(argv, cli.ctx);
  return { exit, out: cli.out(), err: cli.err() };
}

t.test('--version, --help, -h and help alone print the release or the usage, exit 0', async (t) => {
  t.same(await run('--version'), { exit: 0, out: `${productVersion()}\n`, err: '' });
  for (const flag of ['--help', '-h', 'help']) t.same(await run(flag), { exit: 0, out: MAIN_USAGE, err: '' }, flag);
});

t.test('a word after --version is a usage error that never prints it, exit 2, nothing on stdout', async (t) => {
  for (const secret of [TOKEN, HEX_TOKEN, 'status']) {
    const result = await run('--version', secret);
    t.equal(result.exit, 2, `${secret}: exit 2`);
    t.equal(result.out, '', `${secret}: no version printed`);
    t.match(result.err, /^zenova: unexpected argument: a value after --version \(not shown: it may be a token\); zenova --version takes no arguments\n\nUsage: zenova /, secret);
    t.notOk(result.err.split('\n')[0]!.includes(secret), `${secret}: not in the message (the usage after it names the commands)`);
    t.notOk(secret !== 'status' && result.err.includes(secret), `${secret}: not printed`);
  }
  const two = await run('--version', TOKEN, HEX_TOKEN);
  t.equal(two.exit, 2);
  t.match(two.err, /^zenova: unexpected argument: 2 values after --version \(not shown: it may be a token\)/);
  t.notOk(two.err.includes(TOKEN) || two.err.includes(HEX_TOKEN), 'neither value printed');
  const option = await run('--version', '--json');
  t.equal(option.exit, 2);
  t.match(option.err, /^zenova: unexpected argument "--json" after --version: zenova --version takes no arguments\n/, 'an option-shaped word is named');
});

t.test('a word after help, --help or -h is a usage error that never prints it and points to a command\'s --help, exit 2', async (t) => {
  for (const flag of ['help', '--help', '-h']) {
    for (const secret of [TOKEN, HEX_TOKEN]) {
      const result = await run(flag, secret);
      t.equal(result.exit, 2, `${flag} ${secret}: exit 2`);
      t.equal(result.out, '', `${flag}: nothing on stdout`);
      t.match(result.err, new RegExp(`^zenova: unexpected argument: a value after ${flag} \\(not shown: it may be a token\\); zenova ${flag} takes no arguments; for a command's options run "zenova <command> --help"\\n`), flag);
      t.notOk(result.err.includes(secret), `${flag} ${secret}: not printed`);
    }
  }
});

t.test('help, --help or -h before a command name prints that command\'s help, as COMMAND --help does, exit 0', async (t) => {
  const own = await run('install', '--help');
  t.equal(own.exit, 0);
  t.match(own.out, /install node/);
  for (const flag of ['help', '--help', '-h']) t.same(await run(flag, 'install'), own, `${flag} install`);
  t.same(await run('help', 'status'), await run('status', '--help'), 'help status');
});

t.test('help before a command and its subcommand prints that subcommand\'s help, as COMMAND SUB --help does, exit 0', async (t) => {
  const own = await run('install', 'node', '--help');
  t.equal(own.exit, 0);
  t.match(own.out, /zenova install node --package FILE/);
  for (const flag of ['help', '--help', '-h']) t.same(await run(flag, 'install', 'node'), own, `${flag} install node`);
  const create = await run('gateway-node', 'create', '--help');
  t.equal(create.exit, 0);
  t.same(await run('help', 'gateway-node', 'create'), create, 'help gateway-node create');
  // A word not shaped like a subcommand after the command is refused unseen, as after help alone.
  for (const secret of [TOKEN, HEX_TOKEN]) {
    const result = await run('help', 'install', secret);
    t.equal(result.exit, 2, `help install ${secret}: exit 2`);
    t.notOk(result.err.includes(secret) || result.out.includes(secret), 'not printed');
  }
  t.equal((await run('help', 'install', 'node', 'extra')).exit, 2, 'a third word is refused');
});
