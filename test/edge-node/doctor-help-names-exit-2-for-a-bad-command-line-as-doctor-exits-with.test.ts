/**
 * `zenova-node doctor --help` lists every exit status doctor uses: 2 for a bad command line too,
 * which doctor without --state-dir (or with an unknown option) really exits with.
 */
import t from 'tap';
import { runNodeCli } from './cli-capture.js';

t.test('doctor --help lists exit 0, 1 and 2, and a usage error exits 2 as it says', async (t) => {
  const help = await runNodeCli(['doctor', '--help']);
  t.equal(help.code, 0);
  t.match(help.stdout, /\nExit status: 0 all checks passed, 1 a check failed, 2 bad command line\.\n/);
  for (const argv of [['doctor'], ['doctor', '--state-dir', '/x', '--no-such-option']]) {
    const refused = await runNodeCli(argv);
    t.equal(refused.code, 2, `${argv.join(' ')}: ${refused.stderr}`);
    t.match(refused.stderr, /Usage: zenova-node doctor/, `${argv.join(' ')}: with the usage, whose exit statuses include 2`);
    t.match(refused.stderr, /2 bad command line/);
  }
});
