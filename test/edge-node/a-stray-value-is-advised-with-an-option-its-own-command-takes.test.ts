/**
 * A value given where no option takes it (`zenova-node status --state-dir S extra`) is refused
 * without being quoted, and the advice's example is an option of that very command: `--state-dir
 * DIR` for status, doctor and serve, `--token-file FILE` only for enroll, the one command that has it.
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import t from 'tap';
import { parseArgsProblem } from '../../proto/src/cli-usage-errors.js';
import { runNodeCli as run } from './cli-capture.js';

const STRAY = 'zn_it_U3RyYXlWYWx1ZU5ldmVyUXVvdGVkQmFjaw';

t.test('status, doctor and serve advise --state-dir DIR, never --token-file, which they do not take', async (t) => {
  const dir = t.testdir({});
  const stateDir = path.join(dir, 's');
  for (const command of ['status', 'doctor', 'serve']) {
    const result = await run([command, '--state-dir', stateDir, STRAY]);
    t.equal(result.code, 2, `${command}: exit 2`);
    t.match(
      result.stderr,
      'zenova-node: unexpected argument: a value not given after an option (not shown: it may be a token); give each value after its option, e.g. --state-dir DIR\n',
      `${command}: its own option as the example`,
    );
    t.notMatch(result.stderr, '--token-file', `${command}: no option it does not have`);
    t.notMatch(result.stderr, STRAY, `${command}: the stray value is not shown`);
  }
});

t.test('enroll, which takes --token-file, keeps it as its example', async (t) => {
  const dir = t.testdir({});
  const result = await run(['enroll', '--state-dir', path.join(dir, 's'), STRAY]);
  t.equal(result.code, 2);
  t.match(result.stderr, /give each value after its option, e\.g\. --token-file FILE\n/);
  t.notMatch(result.stderr, STRAY);
});

t.test('a parser that names no example points to --help rather than to an option', async (t) => {
  let err: unknown;
  try {
    parseArgs({ args: [STRAY], options: { json: { type: 'boolean' } }, strict: true, allowPositionals: false });
  } catch (caught) {
    err = caught;
  }
  t.equal(parseArgsProblem(err, ['json']), 'unexpected argument: a value not given after an option (not shown: it may be a token); give each value after its option, see --help for the options');
  t.match(parseArgsProblem(err, ['json'], { valueExample: '--env-file F' }), /, e\.g\. --env-file F$/);
});
