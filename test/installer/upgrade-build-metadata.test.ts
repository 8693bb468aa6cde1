/**
 * `--upgrade` with a package whose version differs from the installed one only in build metadata
 * (0.1.0+b2 over 0.1.0+b1: the two rank alike): taken when it is the control plane's version, so a
 * node can be brought to a rebuilt release; refused, naming why, when it is not. It used to be
 * refused as "already runs version 0.1.0+b1, the package's", with the advice that there was nothing to do.
 */
import t from 'tap';
import type { Test } from 'tap';
import { mkdtempSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import type { UpgradeTokenRedeemer } from '../../installer/src/install/upgrade-token.js';
import { captureCli, fakeEnroller, fakeServices, healthyControlPlane, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-upbm-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const DIR = 'opt/zenova-node';

const redeemOk: UpgradeTokenRedeemer = async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion });

async function installedAt(t: Test, version: string): Promise<{ root: string; services: ReturnType<typeof fakeServices> }> {
  const root = mkdtempSync(join(tmpdir(), 'zn-upbm-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  const pkg = await buildNodePackage(work, keys, { name: `i-${Math.random()}.zpkg`, version });
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_install'], cli.ctx,
    hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: fakeEnroller, probeControlPlane: healthyControlPlane({ version }) }));
  if (!t.equal(exit, 0, `installed at ${version}`)) t.comment(cli.out());
  return { root, services };
}

async function upgradeTo(h: { root: string; services: ReturnType<typeof fakeServices> }, version: string, controlPlaneVersion: string): Promise<{ exit: number; out: string }> {
  const pkg = await buildNodePackage(work, keys, { name: `u-${Math.random()}.zpkg`, version });
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_upgrade', '--upgrade'], cli.ctx,
    hostEnv(h.root, { keyPem: keys.publicKeyPem, services: h.services, probeControlPlane: healthyControlPlane({ version: controlPlaneVersion }), redeemUpgrade: redeemOk }));
  return { exit, out: cli.out() };
}

t.test("a rebuild that is the control plane's version is taken", async (t) => {
  const h = await installedAt(t, '0.1.0+b1');
  const r = await upgradeTo(h, '0.1.0+b2', '0.1.0+b2');
  if (!t.equal(r.exit, 0, 'upgraded')) t.comment(r.out);
  t.notMatch(r.out, /already runs version/);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), 'releases/0.1.0+b2');
});

t.test('the same version again is refused as before', async (t) => {
  const h = await installedAt(t, '0.1.0+b1');
  const r = await upgradeTo(h, '0.1.0+b1', '0.1.0+b1');
  t.equal(r.exit, 1);
  t.match(r.out, /NODE-UPGRADE-VERSION: the installed node already runs version 0\.1\.0\+b1, the package's/);
});
