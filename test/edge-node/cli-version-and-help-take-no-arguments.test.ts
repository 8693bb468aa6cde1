/**
 * `zenova-node --version`, `--help`, `-h` and `help` take no more words: a word after them (a token
 * pasted in the wrong place) is a usage error, exit 2, saying where it was and never what it was,
 * as `zenova` refuses it; alone they still print the release and the usage. A command's own
 * `--help` is unchanged.
 */
import t from 'tap';
import { MAIN_USAGE } from '../../edge-node/src/cli/args.js';
import { productVersion } from '../../proto/src/product-version.js';
import { runNodeCli as run } from './cli-capture.js';

const TOKEN = 'zn_it_Tm9kZVZlcnNpb25Bcmd1bWVudA.NeverShown3';

t.test('--version, --help and help alone print the release or the usage, exit 0; serve --help its own', async (t) => {
  t.same(await run(['--version']), { code: 0, stdout: `${productVersion()}\n`, stderr: '' });
  for (const flag of ['--help', '-h', 'help']) t.same(await run([flag]), { code: 0, stdout: MAIN_USAGE, stderr: '' }, flag);
  t.match(await run(['serve', '--help']), { code: 0, stdout: /--config FILE/ });
});

t.test('a word after --version, --help, -h or help is a usage error that never prints it, exit 2', async (t) => {
  for (const flag of ['--version', '--help', '-h', 'help']) {
    const result = await run([flag, TOKEN]);
    t.equal(result.code, 2, `${flag}: exit 2`);
    t.equal(result.stdout, '', `${flag}: nothing on stdout`);
    t.match(result.stderr, new RegExp(`^zenova-node: unexpected argument: a value after ${flag} \\(not shown: it may be a token\\); zenova-node ${flag} takes no arguments`), flag);
    t.notOk(result.stderr.includes(TOKEN), `${flag}: the token is not printed`);
  }
  const two = await run(['--version', 'x', TOKEN]);
  t.match(two, { code: 2, stderr: /^zenova-node: unexpected argument: 2 values after --version \(not shown: it may be a token\)/ });
  t.match(await run(['--version', '--json']), { code: 2, stderr: /^zenova-node: unexpected argument "--json" after --version: zenova-node --version takes no arguments\n\nUsage: zenova-node / });
});

t.test('help, --help or -h before a command name prints that command\'s help, as COMMAND --help does, exit 0', async (t) => {
  for (const command of ['serve', 'enroll', 'status', 'doctor']) {
    const own = await run([command, '--help']);
    t.equal(own.code, 0, `${command} --help`);
    for (const flag of ['help', '--help', '-h']) t.same(await run([flag, command]), own, `${flag} ${command}`);
  }
});
