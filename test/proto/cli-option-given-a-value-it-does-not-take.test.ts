/**
 * unknownOptionMessage for an option written with "=": a known flag that takes no value
 * (`--version=x`) is said to take none instead of "unknown option --version; did you mean
 * --version?", an unknown one is named without its value; the value is never shown (it may be a
 * token pasted after "="). zenova-control says it through its own entry point too.
 */
import t from 'tap';
import { unknownOptionMessage } from '../../proto/src/cli-usage-errors.js';
import { startProcess, tsEntry } from '../fixtures/processes.js';

const TOKEN = 'zn_it_T3B0aW9uR2l2ZW5BVmFsdWU.NeverShown7';

t.test('a known option given a value after "=" is said to take none, the value not shown', async (t) => {
  for (const flag of ['--version', '--help', '-h']) {
    const message = unknownOptionMessage(`${flag}=${TOKEN}`, ['help', 'version']);
    t.equal(message, `option ${flag} takes no value (given one after "=", not shown: it may be a token); see --help for the options`);
    t.notMatch(message, /did you mean/);
  }
});

t.test('an unknown option with "=" is named without its value, with the suggestion it would get alone', async (t) => {
  const message = unknownOptionMessage(`--verson=${TOKEN}`, ['help', 'version']);
  t.equal(message, 'unknown option --verson; did you mean --version?');
  t.equal(unknownOptionMessage(`--zzzzzz=${TOKEN}`, ['help', 'version']), 'unknown option --zzzzzz; see --help for the options');
  t.equal(unknownOptionMessage(TOKEN, ['help', 'version']), 'unknown option (not shown: it does not look like an option name); see --help for the options', 'a bare token still is not quoted');
});

t.test('a known option that takes a value, met where options are not read, is never said to take none', async (t) => {
  // zenova logs -- --since=2h: after "--" it is a component name; --since does take a value.
  const message = unknownOptionMessage(`--since=${TOKEN}`, ['since', 'lines']);
  t.notMatch(message, /takes no value/);
  t.notOk(message.includes(TOKEN), 'the value is not shown');
  t.notMatch(unknownOptionMessage('--version=x', ['since', 'lines']), /takes no value/, '--version is no flag of a command that does not list it');
});

t.test('zenova-control --version=TOKEN exits 2 saying --version takes no value, never printing the token', async (t) => {
  const entry = tsEntry('control-plane/src/main.ts');
  const env: NodeJS.ProcessEnv = Object.fromEntries(Object.keys(process.env).filter((k) => k.startsWith('ZENOVA_')).map((k) => [k, undefined]));
  const proc = await startProcess({ name: 'zenova-control --version=', command: entry.command, args: [...entry.args, `--version=${TOKEN}`], env, t });
  const { code } = await proc.exited;
  t.equal(code, 2);
  t.match(proc.output(), /^zenova-control: option --version takes no value/);
  t.notOk(proc.output().includes(TOKEN), 'the token is not printed');
});
