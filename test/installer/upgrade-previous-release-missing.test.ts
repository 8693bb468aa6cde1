/**
 * `--upgrade` never leaves the host without a release: when the release `current` links to is gone
 * from releases/, the checks (and --check-only) refuse with NODE-UPGRADE-NONE and the relink
 * `zenova status` advises; should it go during the run, a new release that is not ready (or whose
 * switch failed) stays on disk, linked as far as the switch got (NODE-UPGRADE-SWITCH-BACK-FAILED),
 * rather than be switched back to nothing and removed, and
 * a successful upgrade does not claim to have kept it for a manual switch back. The enrollment, the
 * token redemption and the service manager are stand-ins.
 */
import t from 'tap';
import type { Test } from 'tap';
import { existsSync, mkdtempSync, readFileSync, readlinkSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { runStatus } from '../../installer/src/commands/status.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import type { UpgradeTokenRedeemer } from '../../installer/src/install/upgrade-token.js';
import { productVersion } from '../../proto/src/product-version.js';
import { captureCli, fakeServices, hostEnv } from './fake-host.js';
import { releaseKeys } from './package-builder.js';
import { nodeInstalledAtOld } from './node-installed-at-old.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-upmiss-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const OLD = '0.0.9';
const NEW = productVersion();
const DIR = 'opt/zenova-node';

/** A host with node n1 installed at OLD, and the package of NEW. */
async function installedAtOld(t: Test): Promise<{ root: string; host: HostEnv; pkg: string }> {
  const h = await nodeInstalledAtOld(t, work, keys, OLD);
  return { root: h.root, pkg: h.newPkg, host: hostEnv(h.root, { keyPem: keys.publicKeyPem, services: h.services }) };
}

const redeemOk: UpgradeTokenRedeemer = async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion });

async function upgrade(host: HostEnv, pkg: string, extra: string[] = []): Promise<{ exit: number; out: string }> {
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg, '--control-plane', 'https://cp.example.test', '--token', 'tok_upgrade', '--upgrade', ...extra], cli.ctx, host);
  return { exit, out: cli.out() + cli.err() };
}

t.test('an upgrade is refused when the release current links to is gone, with the relink zenova status advises', async (t) => {
  const h = await installedAtOld(t);
  rmSync(join(h.root, DIR, 'releases', OLD), { recursive: true });
  let redeemed = false;
  const host: HostEnv = { ...h.host, redeemUpgrade: async (req) => { redeemed = true; return redeemOk(req); } };

  const checkOnly = await upgrade(host, h.pkg, ['--check-only']);
  t.not(checkOnly.exit, 0, '--check-only --upgrade does not pass');
  t.match(checkOnly.out, /NODE-UPGRADE-NONE: \/opt\/zenova-node\/current links to releases\/0\.0\.9, but release 0\.0\.9 is not there \(removed\?\)/);

  const r = await upgrade(host, h.pkg);
  t.equal(r.exit, 1);
  t.match(r.out, /✗ NODE-UPGRADE-NONE: .*release 0\.0\.9 is not there/);
  t.match(r.out, /holds no release to link it to: put the node's release back there, then `ln -sfn releases\/<version> \/opt\/zenova-node\/current`/, 'the relink advice of zenova status');
  t.notOk(redeemed, 'the token was not redeemed');
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${OLD}`, 'current is untouched');
  t.same(readdirSync(join(h.root, DIR, 'releases')), [], 'nothing was unpacked');

  const status = captureCli(work);
  await runStatus([], status.ctx, h.host);
  t.match(status.out() + status.err(), /holds no release to link it to: put the node's release back there/, 'zenova status gives the same advice');
});

t.test('a release removed during the run is never switched back to: the new one that was not ready stays linked and on disk', async (t) => {
  const h = await installedAtOld(t);
  const r = await upgrade({
    ...h.host,
    redeemUpgrade: redeemOk,
    readyTimeoutMs: 100,
    waitReady: async () => {
      rmSync(join(h.root, DIR, 'releases', OLD), { recursive: true, force: true });
      return { ready: false, reason: 'not ready (test)' };
    },
  }, h.pkg);
  t.equal(r.exit, 1);
  t.match(r.out, /NODE-UPGRADE-SWITCH-BACK-FAILED: .*release 0\.0\.9 is not in \/opt\/zenova-node\/releases \(removed\?\), so nothing was switched back to it/);
  t.notMatch(r.out, /systemctl restart node-edge/, 'no restart advised onto a release that is gone');
  t.notMatch(r.out, /switched back to 0\.0\.9|NODE-UPGRADE-ROLLED-BACK/, 'no switch back is claimed');
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${NEW}`, 'current stays on the new release');
  t.equal(readlinkSync(join(h.root, DIR, 'updater')), `releases/${NEW}`, 'updater stays on the new release');
  t.ok(existsSync(join(h.root, DIR, 'releases', NEW, 'bin/zenova-node')), 'the new release is kept');
  t.match(readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8'), `ZENOVA_NODE_VERSION=${NEW}`, 'the env file names the release current links to');
  const state = JSON.parse(readFileSync(join(h.root, DIR, 'data/update-state.json'), 'utf8')) as { inProgress?: { from: string; to: string } };
  t.same(state.inProgress && { from: state.inProgress.from, to: state.inProgress.to }, { from: OLD, to: NEW }, 'the in-progress record stays, for the same command run again');
});

t.test('a successful upgrade does not claim to keep a previous release that is gone', async (t) => {
  const h = await installedAtOld(t);
  const r = await upgrade({
    ...h.host,
    redeemUpgrade: redeemOk,
    waitReady: async () => {
      rmSync(join(h.root, DIR, 'releases', OLD), { recursive: true, force: true });
      return { ready: true };
    },
  }, h.pkg);
  t.equal(r.exit, 0, 'the upgrade succeeds');
  t.notMatch(r.out, /kept 0\.0\.9/);
  t.match(r.out, /release 0\.0\.9 is not in \/opt\/zenova-node\/releases \(removed\?\): there is none to switch back to by hand/);
});

t.test('a switch that fails once the previous release is gone keeps the new release on disk and says how to link it', async (t) => {
  const h = await installedAtOld(t);
  const services = fakeServices(h.root);
  const write = services.writeUnit.bind(services);
  let failWrites = false;
  services.writeUnit = async (name, text) => {
    if (failWrites) {
      rmSync(join(h.root, DIR, 'releases', OLD), { recursive: true, force: true });
      throw Object.assign(new Error('read-only file system'), { code: 'EROFS' });
    }
    await write(name, text);
  };
  failWrites = true;
  const r = await upgrade({ ...h.host, services, redeemUpgrade: redeemOk }, h.pkg);
  t.equal(r.exit, 1);
  t.match(r.out, /NODE-UPGRADE-SWITCH-BACK-FAILED: switching to release [^:]+: EROFS; release 0\.0\.9 is not in \/opt\/zenova-node\/releases \(removed\?\), so nothing was switched back to it/);
  t.match(r.out, new RegExp(`ln -sfn releases/${NEW.replace(/\./g, '\\.')} current`), 'the advice names the release to link current to');
  t.ok(existsSync(join(h.root, DIR, 'releases', NEW, 'bin/zenova-node')), 'the new release is kept');
  const state = JSON.parse(readFileSync(join(h.root, DIR, 'data/update-state.json'), 'utf8')) as { inProgress?: { from: string; to: string } };
  t.same(state.inProgress && { from: state.inProgress.from, to: state.inProgress.to }, { from: OLD, to: NEW }, 'the in-progress record stays');
});
