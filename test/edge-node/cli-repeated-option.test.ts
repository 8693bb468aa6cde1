// zenova-node took the last of a repeated option silently (`enroll --token A --token B` sent B),
// where zenova refuses it. It is refused now, with exit 2, naming the option and never its values
// (a value may be a token).
import t from 'tap';
import { parseCli } from '../../edge-node/src/cli/args.js';
import { repeatedOptionProblem } from '../../proto/src/cli-usage-errors.js';
import { runNodeCli } from './cli-capture.js';

const TOKEN_A = 'zt_FIRST_SECRET_TOKEN_0123456789';
const TOKEN_B = 'zt_SECOND_SECRET_TOKEN_9876543210';

t.test('zenova-node enroll with --control-plane and --token given twice exits 2 naming the option, not its values', async (t) => {
  const run = await runNodeCli([
    'enroll', '--control-plane', 'https://a.example.test', '--control-plane', 'https://b.example.test',
    '--token', TOKEN_A, '--token', TOKEN_B, '--state-dir', t.testdir({}),
  ]);
  t.equal(run.code, 2);
  t.match(run.stderr, /^zenova-node: --control-plane is given more than once: give it once\n/, 'the first repeated option named');
  t.notMatch(run.stderr, /SECRET|a\.example|b\.example/, 'no value quoted');
  t.equal(run.stdout, '');
});

t.test('every command refuses a value option given twice, in either spelling, and takes a flag given twice', async (t) => {
  const lines: Array<[string[], string]> = [
    [['enroll', '--control-plane', 'https://cp.example.test', `--token=${TOKEN_A}`, '--token', TOKEN_B, '--state-dir', 's'], '--token'],
    [['enroll', '--control-plane', 'https://cp.example.test', '--token-file', 'a', '--token-file=b', '--state-dir', 's'], '--token-file'],
    [['serve', '--state-dir', 'a', '--state-dir', 'b'], '--state-dir'],
    [['serve', '--config', 'a.json', '--listen', '127.0.0.1:1', '--listen', '127.0.0.1:2'], '--listen'],
    [['status', '--state-dir', 'a', '--state-dir', 'a'], '--state-dir'],
    [['doctor', '--state-dir', 'a', '--state-dir', 'b'], '--state-dir'],
  ];
  for (const [argv, option] of lines) {
    t.throws(() => parseCli(argv), { name: 'UsageError', message: `${option} is given more than once: give it once` }, argv.join(' '));
  }
  t.match(parseCli(['serve', '-h', '--help']), { kind: 'help' }, 'a flag twice loses nothing');
});

t.test('the shared check passes options declared multiple and ignores flags', async (t) => {
  const options = { tag: { type: 'string', multiple: true }, name: { type: 'string' }, force: { type: 'boolean' } } as const;
  const tokens = [
    { kind: 'option', name: 'tag' }, { kind: 'option', name: 'tag' },
    { kind: 'option', name: 'force' }, { kind: 'option', name: 'force' },
    { kind: 'positional' }, { kind: 'option', name: 'name' },
  ];
  t.equal(repeatedOptionProblem(tokens, options), undefined);
  t.equal(repeatedOptionProblem([...tokens, { kind: 'option', name: 'name' }], options), '--name is given more than once: give it once');
});
