/**
 * `zenova-node serve --replicas -1`: the negative number is taken as the option's value and refused
 * by --replicas' own check ("a whole number from 1 to 999, got "-1""), not by node:util parseArgs as
 * an "ambiguous" argument whose hint (`--replicas=-XYZ`) only leads to that same refusal.
 */
import path from 'node:path';
import t from 'tap';
import { joinNegativeNumberValues } from '../../proto/src/cli-usage-errors.js';
import { runNodeCli as run } from './cli-capture.js';

t.test('serve --replicas -1 (or -1.5) is refused by the --replicas check, exit 2', async (t) => {
  const stateDir = path.join(t.testdir({}), 's');
  for (const [value, expected] of [
    ['-1', /^zenova-node: --replicas must be a whole number from 1 to 999 \(node-edge processes sharing the caller port\), got "-1"\n/],
    ['-1.5', /^zenova-node: --replicas must be a whole number from 1 to 999 /],
  ] as const) {
    const result = await run(['serve', '--state-dir', stateDir, '--replicas', value]);
    t.equal(result.code, 2, value);
    t.match(result.stderr, expected, value);
    t.notMatch(result.stderr, /ambiguous|-XYZ/, `${value}: not parseArgs' words`);
    t.match(result.stderr, /Usage: zenova-node serve/, `${value}: with the usage`);
  }
  const joined = await run(['serve', '--state-dir', stateDir, '--replicas=-1']);
  t.equal(joined.stderr.split('\n')[0], (await run(['serve', '--state-dir', stateDir, '--replicas', '-1'])).stderr.split('\n')[0], 'the same words as --replicas=-1');
});

t.test('only a negative number is joined to the option before it, and nothing after --', async (t) => {
  const options = { replicas: { type: 'string' }, json: { type: 'boolean' } } as const;
  t.same(joinNegativeNumberValues(['--replicas', '-1', '--json'], options), ['--replicas=-1', '--json']);
  t.same(joinNegativeNumberValues(['--replicas', '-2.5'], options), ['--replicas=-2.5']);
  t.same(joinNegativeNumberValues(['--replicas', '--json'], options), ['--replicas', '--json'], 'an option after it stays an option');
  t.same(joinNegativeNumberValues(['--replicas', '-x'], options), ['--replicas', '-x'], 'a short option stays one');
  t.same(joinNegativeNumberValues(['--json', '-1'], options), ['--json', '-1'], 'a flag takes no value');
  t.same(joinNegativeNumberValues(['--', '--replicas', '-1'], options), ['--', '--replicas', '-1'], 'nothing after --');
  // A pasted secret after an option is not a number, and stays a word of its own.
  t.same(joinNegativeNumberValues(['--replicas', '-1e3'], options), ['--replicas', '-1e3']);
});
