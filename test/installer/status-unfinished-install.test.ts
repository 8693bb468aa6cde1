/**
 * `zenova status` on a host where an install was cut short after its token was used but before its
 * units were written: no node-edge.service names the dir, yet the default dir holds the release,
 * `current` and data/identity.json. Status reads that dir rather than saying nothing is installed,
 * exits 1 and names the --reenroll that recovers it (the install command is refused there:
 * NODE-DATA-EXISTS), with or without --install-dir, and never the advice of an installed node
 * (whose install command NODE-INSTALLED refuses). The enrollment and the service manager are
 * stand-ins (fake-host.ts); the token redemptions are counted.
 */
import t from 'tap';
import type { Test } from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { runStatus } from '../../installer/src/commands/status.js';
import { NODE_UNIT, NO_NODE_INSTALLED, UPDATER_UNIT } from '../../installer/src/install/install-layout.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { captureCli, fakeEnroller, fakeServices, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-status-unfinished-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const pkg = await buildNodePackage(work, keys);
const command = (...extra: string[]): string[] => ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_unfinished_1', ...extra];
const REENROLL_ADVICE = /run its install command with --reenroll \(`zenova gateway-node reenroll-command n1` prints it\)/;

/**
 * A host where `zenova install node` redeemed its token (once: counted) and wrote the release,
 * `current`, etc/ and data/identity.json, and was killed before its units: they are not there.
 */
async function cutShortBeforeUnits(t: Test): Promise<{ root: string; host: HostEnv; redemptions: () => number }> {
  const root = mkdtempSync(join(tmpdir(), 'zn-status-unfinished-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  let redemptions = 0;
  const enroll: Enroller = async (opts) => {
    redemptions += 1;
    return fakeEnroller(opts);
  };
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll });
  const cli = captureCli(work);
  if (!t.equal(await runInstall(command(), cli.ctx, host), 0, 'installed')) t.comment(cli.out());
  // What the killed run never got to: the units.
  await services.removeUnit(NODE_UNIT);
  await services.removeUnit(UPDATER_UNIT);
  services.states.clear();
  return { root, host, redemptions: () => redemptions };
}

async function status(host: HostEnv, ...args: string[]): Promise<{ exit: number; out: string }> {
  const cli = captureCli(work);
  const exit = await runStatus(args, cli.ctx, host);
  return { exit, out: cli.out() };
}

t.test('status without node-edge.service finds an install cut short before its units in the default dir, exits 1 and names the --reenroll that recovers it', async (t) => {
  const h = await cutShortBeforeUnits(t);
  t.equal(h.redemptions(), 1, 'the token was redeemed');
  const r = await status(h.host);
  t.equal(r.exit, 1);
  t.match(r.out, new RegExp(`^install: +${NO_NODE_INSTALLED.replace(/[()]/g, '\\$&')}; /opt/zenova-node keeps the data of node n1 from an install that did not finish: `, 'm'));
  t.match(r.out, REENROLL_ADVICE);
  t.match(r.out, /^install dir: +\/opt\/zenova-node$/m, 'the default dir is read');
  t.match(r.out, /^service: +node-edge\.service not-installed$/m);
  t.notMatch(r.out, /refused while node-edge\.service is installed/, 'not the advice of an installed node');

  const json = await status(h.host, '--json');
  t.equal(json.exit, 1);
  t.match(JSON.parse(json.out), { installDir: '/opt/zenova-node', service: { state: 'not-installed' }, error: REENROLL_ADVICE });
  // Scripts read `installed`: nothing runs this node, so it is not installed, only left unfinished.
  t.match(JSON.parse(json.out), { installed: false, unfinishedInstall: true }, 'installed is false without node-edge.service');

  // The advice holds: the install command is refused there, the --reenroll installs the node again.
  const install = captureCli(work);
  t.equal(await runInstall(command('--check-only'), install.ctx, h.host), 1, 'the install command is refused there');
  t.match(install.out(), /NODE-DATA-EXISTS/);
  const reenroll = captureCli(work);
  if (!t.equal(await runInstall(command('--reenroll'), reenroll.ctx, h.host), 0, 'the --reenroll installs it again')) t.comment(reenroll.out());
  t.equal(h.redemptions(), 2, 'one redemption for the install, one for the reenroll');
  const after = await status(h.host);
  t.match(after.out, /^service: +node-edge\.service active$/m);
  t.match(JSON.parse((await status(h.host, '--json')).out), { installed: true, unfinishedInstall: false });
  t.notMatch(after.out, /did not finish/);
});

t.test('status --install-dir of that dir gives the --reenroll advice, not the installed node\'s, and exits 1', async (t) => {
  const h = await cutShortBeforeUnits(t);
  const r = await status(h.host, '--install-dir', '/opt/zenova-node');
  t.equal(r.exit, 1);
  t.match(r.out, REENROLL_ADVICE);
  t.match(r.out, /^node: +not enrolled \(.*\); re-enroll it: `zenova gateway-node reenroll-command n1` prints the `--reenroll` command to run here \(node-edge\.service is not installed: it installs the node again around the kept data\/\)$/m);
  t.notMatch(r.out, /refused while node-edge\.service is installed/);
});

t.test('an enrolled node without node-edge.service exits 1 too: nothing runs it', async (t) => {
  const h = await cutShortBeforeUnits(t);
  // A real enrollment writes the credential beside the identity (the stand-in writes none).
  writeFileSync(join(h.root, 'opt/zenova-node/data/credential.json'), JSON.stringify({ current: { id: 'cred-1', secret: 'zn_cred_secret', expiresAt: '2099-01-01T00:00:00Z' } }), { mode: 0o600 });
  const r = await status(h.host);
  t.match(r.out, /^node: +n1 \(id id-1\), enrolled /m, 'the node reads as enrolled');
  t.equal(r.exit, 1);
  t.match(r.out, REENROLL_ADVICE);
});

t.test('an install cut short before its enrollment (current, no identity) is told to run its install command again', async (t) => {
  const h = await cutShortBeforeUnits(t);
  rmSync(join(h.root, 'opt/zenova-node/data/identity.json'));
  const r = await status(h.host);
  t.equal(r.exit, 1);
  t.match(r.out, /^install: +no gateway node is installed on this host \(no node-edge service\); \/opt\/zenova-node holds release \S+ from an install that did not finish, without a node identity: run its install command again$/m);
  t.match(r.out, /there is no node identity to re-enroll: run the install command again/);
  t.notMatch(r.out, /--reenroll/);

  // Without `current` either, data/ holds nothing of a node: no leftover, nothing is installed.
  rmSync(join(h.root, 'opt/zenova-node/current'));
  const none = await status(h.host);
  t.equal(none.exit, 1);
  t.equal(none.out, `node:          ${NO_NODE_INSTALLED}\n`);
});
