/**
 * The words after a `zenova` command (`gateway-node <command>`, `logs <component>`, `install
 * <target>`): a mistyped one gets the word it most likely meant, as a mistyped first word does, and
 * a word not shaped like one (often a token pasted in the wrong place) is never quoted back to the
 * terminal. Always a usage error: exit 2, pointing to that command's --help. Nothing here reaches
 * a host or a control plane: each word is refused before anything runs.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from '../../installer/src/cli.js';
import { captureCli } from './fake-host.js';

const work = mkdtempSync(join(tmpdir(), 'zn-sub-command-typos-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const TOKEN = 'zn_it_U3ViV29yZFRva2VuTmV2ZXJTaG93bg.Xy9';

async function refused(...argv: string[]): Promise<{ exit: number; err: string; out: string }> {
  const cli = captureCli(work);
  const exit = await runCli(argv, cli.ctx);
  return { exit, err: cli.err(), out: cli.out() };
}

t.test('zenova gateway-node: a mistyped command gets the one it most likely meant (a swapped pair of letters too), exit 2', async (t) => {
  const swapped = await refused('gateway-node', 'lsit');
  t.equal(swapped.exit, 2);
  t.match(swapped.err, /^zenova: unknown gateway-node command "lsit"; did you mean list\?\nRun "zenova gateway-node --help" for usage\.\n$/);
  const shortened = await refused('gateway-node', 'install');
  t.equal(shortened.exit, 2);
  t.match(shortened.err, /unknown gateway-node command "install"; did you mean install-command\?/);
  const other = await refused('gateway-node', 'frobnicate');
  t.equal(other.exit, 2);
  t.match(other.err, /unknown gateway-node command "frobnicate"; see --help for the gateway-node commands/);
});

t.test('zenova gateway-node: a token-like word in the command\'s place is not quoted back', async (t) => {
  const pasted = await refused('gateway-node', TOKEN);
  t.equal(pasted.exit, 2);
  t.match(pasted.err, /unknown gateway-node command \(not shown: it does not look like a gateway-node command name\)/);
  t.notOk(pasted.err.includes(TOKEN) || pasted.out.includes(TOKEN), 'the token is not printed');
});

t.test('zenova logs: a mistyped component gets the one it most likely meant, node-caddy included, exit 2', async (t) => {
  const typo = await refused('logs', 'node-egde');
  t.equal(typo.exit, 2);
  t.match(typo.err, /^zenova: unknown component "node-egde"; did you mean node-edge\?\nRun "zenova logs --help" for usage\.\n$/);
  const standIn = await refused('logs', 'node-cady');
  t.equal(standIn.exit, 2);
  t.match(standIn.err, /unknown component "node-cady"; did you mean node-caddy\?/);
});

t.test('zenova logs: a token-like word in the component\'s place is not quoted back', async (t) => {
  const pasted = await refused('logs', TOKEN);
  t.equal(pasted.exit, 2);
  t.match(pasted.err, /unknown component \(not shown: it does not look like a component name\); one of: node-edge, node-updater/);
  t.notOk(pasted.err.includes(TOKEN) || pasted.out.includes(TOKEN), 'the token is not printed');
});

t.test('zenova install: a mistyped target gets node, a token-like one is not quoted back, and options without the target say it is missing', async (t) => {
  const typo = await refused('install', 'nod');
  t.equal(typo.exit, 2);
  t.match(typo.err, /^zenova: unknown install target "nod"; did you mean node\?\nRun "zenova install node --help" for usage\.\n$/);
  const pasted = await refused('install', TOKEN, '--check-only');
  t.equal(pasted.exit, 2);
  t.match(pasted.err, /unknown install target \(not shown: it does not look like an install target name\); one of: node/);
  t.notOk(pasted.err.includes(TOKEN) || pasted.out.includes(TOKEN), 'the token is not printed');
  const noTarget = await refused('install', '--package', 'zenova-node.zpkg');
  t.equal(noTarget.exit, 2);
  t.match(noTarget.err, /no install target given before the options \(the one there is: zenova install node …\)/);
});
