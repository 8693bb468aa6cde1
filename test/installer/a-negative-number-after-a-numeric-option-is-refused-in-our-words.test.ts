/**
 * `zenova logs node-edge --lines -5` and `zenova gateway-node create … --replicas -1`: the negative
 * number is taken as the option's value and refused by the option's own check (`--lines must be a
 * whole number, got "-5"`), not by node:util parseArgs as an "ambiguous" argument whose hint
 * (`--lines=-XYZ`) only leads to that same refusal. Nothing is sent: the connection is a closed port.
 */
import { tmpdir } from 'node:os';
import t from 'tap';
import { runCli } from '../../installer/src/cli.js';
import { captureCli } from './fake-host.js';

/** `zenova …` in process, its exit code and standard error. */
async function zenova(argv: string[]): Promise<{ code: number; err: string }> {
  const cli = captureCli(tmpdir());
  const ctx = { ...cli.ctx, env: { ZENOVA_CONTROL_PLANE_URL: 'http://127.0.0.1:1', ZENOVA_ADMIN_TOKEN: 'test-admin-token-0123456789abcdef' } };
  const code = await runCli(argv, ctx);
  return { code, err: cli.err() };
}

t.test('a negative number after a numeric option is refused by that option\'s check, exit 2', async (t) => {
  const cases: Array<[string[], string]> = [
    [['logs', 'node-edge', '--lines', '-5'], 'zenova: --lines must be a whole number, got "-5"\n'],
    [['logs', 'node-edge', '--lines', '-1.5'], 'zenova: --lines must be a whole number, got "-1.5"\n'],
    [['gateway-node', 'create', '--name', 'branch-1', '--address', '10.0.0.5', '--replicas', '-1'], 'zenova: --replicas must be a whole number, got "-1"\n'],
    [['gateway-node', 'create', '--name', 'branch-1', '--address', '10.0.0.5', '--spool-quota-gb', '-2'], 'zenova: --spool-quota-gb must be a whole number, got "-2"\n'],
  ];
  for (const [argv, expected] of cases) {
    const result = await zenova(argv);
    t.equal(result.code, 2, argv.join(' '));
    t.equal(result.err.split('\n')[0] + '\n', expected, argv.join(' '));
    t.notMatch(result.err, /ambiguous|-XYZ/, `${argv.join(' ')}: not parseArgs' words`);
  }
});

t.test('an option after a numeric option is still refused as its missing value', async (t) => {
  const result = await zenova(['logs', 'node-edge', '--lines', '--since', '1h']);
  t.equal(result.code, 2);
  t.notMatch(result.err, /--lines must be a whole number/, '--since is not taken as --lines\' value');
});
