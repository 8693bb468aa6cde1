/**
 * A word no option or NAME takes (`zenova logs node-edge <TOKEN>`, `zenova gateway-node show a
 * <TOKEN>`) is often a token pasted in the wrong place: the usage error says where it was, never
 * what it was, as `zenova install node` and the shared parseArgs messages do. An option-shaped word
 * (after `--`) is still named. Always exit 2, pointing to the command's --help; each word is
 * refused before anything reaches a host or a control plane.
 */
import t from 'tap';
import type { Test } from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from '../../installer/src/cli.js';
import { captureCli } from './fake-host.js';

const work = mkdtempSync(join(tmpdir(), 'zn-stray-arguments-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const TOKEN = 'zn_it_U3RyYXlBcmd1bWVudFRva2Vu.NeverShown9';
/** An admin token as `openssl rand -hex 16` makes it: letters, digits, shaped like a command word. */
const HEX_TOKEN = 'c0ffee5d8a9b4e21f3a7d6b0e19c4a2f';

async function refused(...argv: string[]): Promise<{ exit: number; err: string; out: string }> {
  const cli = captureCli(work);
  const exit = await runCli(argv, cli.ctx);
  return { exit, err: cli.err(), out: cli.out() };
}

function notShown(t: Test, result: { err: string; out: string }, secret: string, what: string): void {
  t.notOk(result.err.includes(secret) || result.out.includes(secret), `${what}: the token is not printed`, { stderr: result.err });
}

t.test('zenova logs node-edge with a token after the component says a value came after COMPONENT, without printing it, exit 2', async (t) => {
  for (const secret of [TOKEN, HEX_TOKEN]) {
    const result = await refused('logs', 'node-edge', secret);
    t.equal(result.exit, 2);
    t.match(result.err, /^zenova: unexpected argument: a value after COMPONENT \(not shown: it may be a token\); zenova logs takes one COMPONENT\nRun "zenova logs --help" for usage\.\n$/);
    notShown(t, result, secret, 'logs');
  }
  const two = await refused('logs', 'node-edge', '--lines', '5', TOKEN, HEX_TOKEN);
  t.equal(two.exit, 2);
  t.match(two.err, /unexpected argument: 2 values after COMPONENT \(not shown: it may be a token\)/);
  notShown(t, two, TOKEN, 'two values');
  notShown(t, two, HEX_TOKEN, 'two values');
});

t.test('zenova gateway-node show, delete and the one-time commands with a token after NAME do not print it, exit 2', async (t) => {
  for (const sub of ['show', 'delete', 'install-command', 'reenroll-command', 'upgrade-command']) {
    const yes = sub === 'delete' ? ['--yes'] : [];
    for (const secret of [TOKEN, HEX_TOKEN]) {
      const positional = await refused('gateway-node', sub, 'edge-1', secret, ...yes);
      t.equal(positional.exit, 2, `${sub} NAME TOKEN: exit 2`);
      t.match(positional.err, new RegExp(`^zenova: unexpected argument: a value after NAME \\(not shown: it may be a token\\); zenova gateway-node ${sub} takes one NAME \\(or --name NAME\\)\\nRun "zenova gateway-node ${sub} --help" for usage\\.\\n$`), sub);
      notShown(t, positional, secret, `${sub} NAME TOKEN`);
      const withOption = await refused('gateway-node', sub, '--name', 'edge-1', 'edge-1', secret, ...yes);
      t.equal(withOption.exit, 2, `${sub} --name NAME NAME TOKEN: exit 2`);
      t.match(withOption.err, /unexpected argument: a value after NAME \(not shown: it may be a token\)/, `${sub} with --name`);
      notShown(t, withOption, secret, `${sub} --name NAME NAME TOKEN`);
    }
  }
});

t.test('zenova gateway-node: a token given as NAME beside a different --name is not printed; two node names are still both named', async (t) => {
  const tokenAsName = await refused('gateway-node', 'show', '--name', 'edge-1', TOKEN);
  t.equal(tokenAsName.exit, 2);
  t.match(tokenAsName.err, /NAME \(not shown: not a node name, it may be a token\) and --name "edge-1" differ: give the node name once/);
  notShown(t, tokenAsName, TOKEN, 'token as NAME');
  const tokenAsOption = await refused('gateway-node', 'reenroll-command', 'edge-1', '--name', HEX_TOKEN);
  t.equal(tokenAsOption.exit, 2);
  t.match(tokenAsOption.err, /NAME "edge-1" and --name \(not shown: not a node name, it may be a token\) differ/);
  notShown(t, tokenAsOption, HEX_TOKEN, 'token as --name');
  const names = await refused('gateway-node', 'show', '--name', 'edge-1', 'edge-2');
  t.match(names.err, /NAME "edge-2" and --name "edge-1" differ: give the node name once/);
});

t.test('zenova gateway-node delete with a token as NAME and no --yes does not print it; a node name is still named', async (t) => {
  const result = await refused('gateway-node', 'delete', TOKEN);
  t.equal(result.exit, 2);
  t.match(result.err, /^zenova: deleting node \(not shown: not a node name, it may be a token\) revokes its credentials and cuts its connection for good; add --yes to confirm\n/);
  notShown(t, result, TOKEN, 'delete TOKEN');
  const named = await refused('gateway-node', 'delete', 'edge-1');
  t.match(named.err, /^zenova: deleting node edge-1 revokes its credentials/);
});

t.test('zenova status, gateway-node list and gateway-node create refuse a stray value without printing it and point to their --help', async (t) => {
  const create = ['--name', 'edge-1', '--address', 'edge-1.example.com'];
  for (const [argv, help] of [[['status'], 'status'], [['gateway-node', 'list'], 'gateway-node list'], [['gateway-node', 'create', ...create], 'gateway-node create']] as const) {
    for (const secret of [TOKEN, HEX_TOKEN]) {
      const result = await refused(...argv, secret);
      t.equal(result.exit, 2, `${help}: exit 2`);
      t.match(result.err, `zenova: unexpected argument: a value not given after an option (not shown: it may be a token); give each value after its option (zenova ${help} --help lists them)\nRun "zenova ${help} --help" for usage.\n`, help);
      notShown(t, result, secret, help);
    }
  }
});

t.test('an option-shaped word after -- is still named, with why it is not an option, and the words after it are not', async (t) => {
  const logs = await refused('logs', 'node-edge', '--', '--lines', TOKEN);
  t.equal(logs.exit, 2);
  t.match(logs.err, /^zenova: unexpected argument "--lines": no word after -- is an option; zenova logs takes one COMPONENT\n/);
  notShown(t, logs, TOKEN, 'a value after the option-shaped word');
  const status = await refused('status', '--', '--json');
  t.equal(status.exit, 2);
  t.match(status.err, /^zenova: unexpected argument "--json": no word after -- is an option; give each value after its option \(zenova status --help lists them\)\n/);
});
