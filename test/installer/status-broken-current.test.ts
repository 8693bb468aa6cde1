/**
 * `zenova status` where the install dir's `current` link names no release that is there: one to a
 * release that was removed (dangling), one to another place than releases/ (an absolute link edited
 * by hand). The link's target is never reported as the installed release: the version row and
 * `--json` (`brokenCurrent`, `version` null) say the link is broken and how to fix it, and status
 * exits 1. The enrollment and the service manager are stand-ins (fake-host.ts).
 */
import t from 'tap';
import type { Test } from 'tap';
import { mkdtempSync, readlinkSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { runStatus } from '../../installer/src/commands/status.js';
import { NODE_UNIT, UPDATER_UNIT } from '../../installer/src/install/install-layout.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import type { FakeServices } from './fake-host.js';
import { captureCli, fakeEnroller, fakeServices, healthyControlPlane, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-status-broken-current-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const pkg = await buildNodePackage(work, keys, { version: '0.4.0' });
const DIR = 'opt/zenova-node';

/** An installed, enrolled node (status exits 0 until its link is broken). */
async function installedNode(t: Test): Promise<{ root: string; host: HostEnv; services: FakeServices }> {
  const root = mkdtempSync(join(tmpdir(), 'zn-status-broken-current-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: fakeEnroller, probeControlPlane: healthyControlPlane({ version: '0.4.0' }) });
  const cli = captureCli(work);
  const command = ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_broken_current_1'];
  if (!t.equal(await runInstall(command, cli.ctx, host), 0, 'installed')) t.comment(cli.out());
  // A real enrollment writes the credential beside the identity (the stand-in writes none).
  writeFileSync(join(root, DIR, 'data/credential.json'), JSON.stringify({ current: { id: 'cred-1', secret: 'zn_cred_secret', expiresAt: '2099-01-01T00:00:00Z' } }), { mode: 0o600 });
  return { root, host, services };
}

async function status(host: HostEnv, ...args: string[]): Promise<{ exit: number; out: string }> {
  const cli = captureCli(work);
  const exit = await runStatus(args, cli.ctx, host);
  return { exit, out: cli.out() };
}

function relink(root: string, target: string): void {
  rmSync(join(root, DIR, 'current'));
  symlinkSync(target, join(root, DIR, 'current'));
}

t.test('status of a node whose current links to a removed release says the link is broken, not that release, exits 1 and names a release to link instead', async (t) => {
  const { root, host } = await installedNode(t);
  t.equal(readlinkSync(join(root, DIR, 'current')), 'releases/0.4.0');
  const healthy = await status(host);
  t.equal(healthy.exit, 0, 'installed and enrolled: exit 0');
  t.match(healthy.out, /^version: +0\.4\.0$/m);

  // The release current names is gone; another one is there to link to.
  renameSync(join(root, DIR, 'releases/0.4.0'), join(root, DIR, 'releases/0.3.9'));
  const broken = await status(host);
  t.equal(broken.exit, 1, 'a node without its release exits 1');
  t.match(broken.out, /^version: +BROKEN: \/opt\/zenova-node\/current links to releases\/0\.4\.0, but release 0\.4\.0 is not there/m);
  t.match(broken.out, /`ln -sfn releases\/0\.3\.9 \/opt\/zenova-node\/current`, then `systemctl restart node-edge`/);
  t.notMatch(broken.out, /^version: +0\.4\.0$/m, 'the missing release is not reported as the version');

  const json = await status(host, '--json');
  t.equal(json.exit, 1);
  const report = JSON.parse(json.out) as { version: unknown; brokenCurrent: unknown; installed: unknown };
  t.equal(report.version, null, 'no version');
  t.match(report.brokenCurrent, { target: 'releases/0.4.0', problem: 'missing-release', message: /release 0\.4\.0 is not there.*ln -sfn releases\/0\.3\.9/ });
  t.equal(report.installed, true, 'the unit is still installed');

  // The advice works: linked to the release that is there, the node is whole again.
  relink(root, 'releases/0.3.9');
  const fixed = await status(host, '--json');
  t.equal(fixed.exit, 0);
  t.match(JSON.parse(fixed.out), { version: '0.3.9', brokenCurrent: null });
});

t.test('status of a node whose current is an absolute link outside its releases/ says so rather than naming the target, and exits 1', async (t) => {
  const { host, root } = await installedNode(t);
  relink(root, '/srv/elsewhere/zenova-0.4.0');
  const broken = await status(host);
  t.equal(broken.exit, 1);
  t.match(broken.out, /^version: +BROKEN: \/opt\/zenova-node\/current links to \/srv\/elsewhere\/zenova-0\.4\.0, not to a release in \/opt\/zenova-node\/releases, so the version is unknown; link it to a release that is there: `ln -sfn releases\/0\.4\.0 \/opt\/zenova-node\/current`/m);
  const json = await status(host, '--json');
  t.equal(json.exit, 1);
  t.match(JSON.parse(json.out), { version: null, brokenCurrent: { target: '/srv/elsewhere/zenova-0.4.0', problem: 'outside-releases' } });

  // No release left at all: the advice says so instead of naming one.
  rmSync(join(root, DIR, 'releases/0.4.0'), { recursive: true });
  const none = await status(host);
  t.equal(none.exit, 1);
  t.match(none.out, /\/opt\/zenova-node\/releases holds no release to link it to: put the node's release back there/);
});

t.test('an install cut short before its units and identity, with current linked outside releases/, is not said to hold that target as its release', async (t) => {
  const { host, root, services } = await installedNode(t);
  await services.removeUnit(NODE_UNIT);
  await services.removeUnit(UPDATER_UNIT);
  services.states.clear();
  rmSync(join(root, DIR, 'data/identity.json'));
  relink(root, '/etc');
  const r = await status(host);
  t.equal(r.exit, 1);
  t.notMatch(r.out, /holds release \/etc/, 'the target is not called a release');
  t.match(r.out, /^install: +.*\/opt\/zenova-node holds a broken current link from an install that did not finish, without a node identity: run its install command again$/m);
  t.match(r.out, /^version: +BROKEN: \/opt\/zenova-node\/current links to \/etc, not to a release in \/opt\/zenova-node\/releases/m);
  t.match(JSON.parse((await status(host, '--json')).out), { installed: false, unfinishedInstall: true, version: null, brokenCurrent: { target: '/etc', problem: 'outside-releases' } });
});
