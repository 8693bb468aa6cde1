/**
 * `--upgrade` failing before its release ever runs leaves the node as it was: the control plane
 * unreachable when the token is redeemed (nothing switched, the unpacked release removed), and a
 * unit that cannot be written after the token was used (env file, units and links put back, the
 * node never stopped, the release not marked as a failed version). The enrollment, the token
 * redemption and the service manager are stand-ins here; test/e2e/install-upgrade.test.ts runs the
 * real control plane and node.
 */
import t from 'tap';
import type { Test } from 'tap';
import { generateKeyPairSync } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { EnrollError } from '../../edge-node/src/enroll/enroll-errors.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import type { UpgradeTokenRedeemer } from '../../installer/src/install/upgrade-token.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { productVersion } from '../../edge-node/src/product-version.js';
import { captureCli, fakeServices, healthyControlPlane, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-upf-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const OLD = '0.0.9';
const NEW = productVersion();
const DIR = 'opt/zenova-node';

const enrollOk: Enroller = async (opts) => {
  mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
  const signing = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();
  writeFileSync(join(opts.stateDir, 'identity.json'), JSON.stringify({
    nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: 'https://cp.example.test', gateway: { target: 'gw.example.test:8443', serverName: 'gw.example.test' },
    configSigningPublicKeyPem: signing, enrolledAt: new Date().toISOString(),
  }));
  return { nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gatewayTarget: 'gw.example.test:8443', stateDir: opts.stateDir, reenrolled: false };
};

/** A host with node n1 installed at OLD (a control plane that ran OLD then), and the package of NEW. */
async function installedAtOld(t: Test, failUnitWrites: { on: boolean }): Promise<{ root: string; host: HostEnv; services: ReturnType<typeof fakeServices>; pkg: string }> {
  const root = mkdtempSync(join(tmpdir(), 'zn-upf-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  const write = services.writeUnit.bind(services);
  services.writeUnit = async (name, text) => {
    if (failUnitWrites.on) throw Object.assign(new Error('read-only file system'), { code: 'EROFS' });
    await write(name, text);
  };
  const old = await buildNodePackage(work, keys, { name: `old-${Math.random()}.zpkg`, version: OLD });
  const cli = captureCli(work);
  const installHost = hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: enrollOk, probeControlPlane: healthyControlPlane({ version: OLD }) });
  const installed = await runInstall(['node', '--package', old.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_install'], cli.ctx, installHost);
  if (!t.equal(installed, 0, `installed at ${OLD}`)) t.comment(cli.out());
  const pkg = await buildNodePackage(work, keys, { name: `new-${Math.random()}.zpkg` });
  return { root, services, pkg: pkg.file, host: hostEnv(root, { keyPem: keys.publicKeyPem, services }) };
}

async function upgrade(host: HostEnv, pkg: string): Promise<{ exit: number; out: string }> {
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg, '--control-plane', 'https://cp.example.test', '--token', 'tok_upgrade', '--upgrade'], cli.ctx, host);
  return { exit, out: cli.out() + cli.err() };
}

t.test('the control plane unreachable at the token: nothing is switched and the unpacked release is removed', async (t) => {
  const h = await installedAtOld(t, { on: false });
  const env = readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8');
  h.services.calls.length = 0;
  const unreachable: UpgradeTokenRedeemer = async () => {
    throw new EnrollError('UNREACHABLE', 'cannot reach the control plane at cp.example.test: connect ECONNREFUSED');
  };
  const r = await upgrade({ ...h.host, redeemUpgrade: unreachable }, h.pkg);
  t.equal(r.exit, 1);
  t.match(r.out, /✗ NODE-ENROLL-FAILED: the upgrade token could not be redeemed: cannot reach the control plane/);
  t.match(r.out, /Nothing was switched/);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${OLD}`);
  t.notOk(existsSync(join(h.root, DIR, 'releases', NEW)), 'the unpacked release is removed');
  t.equal(readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8'), env);
  t.same(h.services.calls, [], 'the service was not touched');
  t.notOk(existsSync(join(h.root, DIR, 'data/update-state.json')), 'no upgrade is recorded');
});

t.test('a unit that cannot be written after the token was used puts everything back and never stops the node', async (t) => {
  const failUnitWrites = { on: false };
  const h = await installedAtOld(t, failUnitWrites);
  const env = readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8');
  const unit = readFileSync(join(h.root, 'etc/systemd/system/node-edge.service'), 'utf8');
  h.services.calls.length = 0;
  failUnitWrites.on = true;
  const redeemed: UpgradeTokenRedeemer = async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion });
  const r = await upgrade({ ...h.host, redeemUpgrade: redeemed }, h.pkg);
  t.equal(r.exit, 1);
  t.match(r.out, /✗ NODE-WRITE-FAILED: switching to release .*EROFS/);
  t.match(r.out, /switched back: node-edge\.service was never stopped and runs 0\.0\.9 as before/);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${OLD}`);
  t.equal(readlinkSync(join(h.root, DIR, 'updater')), `releases/${OLD}`);
  t.equal(readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8'), env, 'the env file is as it was');
  t.equal(readFileSync(join(h.root, 'etc/systemd/system/node-edge.service'), 'utf8'), unit, 'the unit is as it was');
  t.notOk(existsSync(join(h.root, DIR, 'releases', NEW)));
  t.notOk(h.services.calls.some((c) => c.startsWith('stop') || c.startsWith('start')), `never stopped or started: ${h.services.calls.join(', ')}`);
  const state = JSON.parse(readFileSync(join(h.root, DIR, 'data/update-state.json'), 'utf8'));
  t.match(state, { lastUpgrade: { from: OLD, to: NEW, outcome: 'rolled-back' } });
  t.notOk('failedVersion' in state, 'a release that never ran is not a failed version');
});
