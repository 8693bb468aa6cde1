/**
 * `zenova-control --version`, `--help` and `-h` take no more words: a word after them (a token
 * pasted in the wrong place) is a usage error, exit 2, saying where it was and never what it was,
 * as `zenova` and `zenova-node` refuse it (proto's wordsAfterTopFlagProblem); alone they still
 * print the release and the usage, exit 0. The control plane never starts for them.
 */
import t from 'tap';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import { productVersion } from '../../proto/src/product-version.js';

const entry = tsEntry('control-plane/src/main.ts');
const TOKEN = 'zn_it_Q29udHJvbFZlcnNpb25Bcmd1bWVudA.NeverShown5';

// The test runner's own ZENOVA_* variables must not leak into the child.
const CLEAN_ENV: NodeJS.ProcessEnv = Object.fromEntries(
  Object.keys(process.env).filter((k) => k.startsWith('ZENOVA_')).map((k) => [k, undefined]),
);

async function run(t: { teardown(fn: () => unknown): void }, args: string[]): Promise<{ code: number | null; output: string }> {
  const proc = await startProcess({ name: `zenova-control ${args.join(' ')}`.slice(0, 40), command: entry.command, args: [...entry.args, ...args], env: CLEAN_ENV, t });
  const { code } = await proc.exited;
  return { code, output: proc.output() };
}

t.test('--version, --help and -h alone print the release or the usage, exit 0', async (t) => {
  const version = await run(t, ['--version']);
  t.equal(version.code, 0);
  t.equal(version.output.trim(), productVersion());
  for (const flag of ['--help', '-h']) {
    const help = await run(t, [flag]);
    t.equal(help.code, 0, `${flag}: exit 0`);
    t.match(help.output, /^Usage: zenova-control \[--help\] \[--version\]/, `${flag}: the usage`);
  }
});

t.test('a word after --version, --help or -h is a usage error that never prints it, exit 2', async (t) => {
  for (const flag of ['--version', '--help', '-h']) {
    const result = await run(t, [flag, TOKEN]);
    t.equal(result.code, 2, `${flag}: exit 2`);
    t.match(result.output, new RegExp(`^zenova-control: unexpected argument: a value after ${flag} \\(not shown: it may be a token\\); zenova-control ${flag} takes no arguments\n`), flag);
    t.notOk(result.output.includes(TOKEN), `${flag}: the token is not printed`);
    t.notOk(result.output.includes(`${productVersion()}\n`), `${flag}: no release printed`);
  }
  const two = await run(t, ['--version', 'x', TOKEN]);
  t.equal(two.code, 2);
  t.match(two.output, /^zenova-control: unexpected argument: 2 values after --version \(not shown: it may be a token\)/);
  t.notOk(two.output.includes(TOKEN), 'the token is not printed');
  const option = await run(t, ['--version', '--json']);
  t.equal(option.code, 2);
  t.match(option.output, /^zenova-control: unexpected argument "--json" after --version: zenova-control --version takes no arguments\n\nUsage: zenova-control /);
});

t.test('a word before --version or --help is the stray argument it always was, not a reason to print and exit 0', async (t) => {
  for (const flag of ['--version', '--help']) {
    const result = await run(t, [TOKEN, flag]);
    t.equal(result.code, 2, `TOKEN ${flag}: exit 2`);
    t.match(result.output, /^zenova-control: unexpected argument \(not shown: it may be a secret\)/);
    t.notOk(result.output.includes(TOKEN), `TOKEN ${flag}: the token is not printed`);
  }
});
