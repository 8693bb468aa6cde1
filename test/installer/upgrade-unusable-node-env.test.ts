/**
 * `--upgrade` restarts node-edge with the installed etc/node.env. One it cannot start with (a
 * ZENOVA_NODE_LISTEN that is missing or not HOST:PORT, a ZENOVA_NODE_TLS_CERT_FILE that cannot be
 * read) is a blocking finding of the checks, --check-only included, naming that file: no token is
 * redeemed and nothing written. Should the file turn unusable after the checks, node-edge is never
 * restarted: the run switches back, records no failed version and says the release never ran. A
 * previous release not ready after a switch back is told to restart it, not to reenroll. The token
 * redemption and the service manager are stand-ins (fake-host.ts); the redemptions are counted.
 */
import t from 'tap';
import type { Test } from 'tap';
import { existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import type { UpgradeTokenRedeemer } from '../../installer/src/install/upgrade-token.js';
import { productVersion } from '../../proto/src/product-version.js';
import { captureCli, fakeEnroller, fakeServices, healthyControlPlane, hostEnv, listTree } from './fake-host.js';
import type { FakeServices } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-upenv-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const OLD = '0.0.9';
const NEW = productVersion();
const DIR = 'opt/zenova-node';
const ENV = `${DIR}/etc/node.env`;
const oldPkg = await buildNodePackage(work, keys, { name: 'old.zpkg', version: OLD });
const newPkg = await buildNodePackage(work, keys, { name: 'new.zpkg' });

interface Installed {
  root: string;
  host: HostEnv;
  services: FakeServices;
  /** How many times the upgrade token was redeemed. */
  redemptions: () => number;
}

/** Node n1 installed at OLD; the upgrade host's redeemer agrees and counts, after running `onRedeem`. */
async function installedAtOld(t: Test, onRedeem: () => void = () => undefined): Promise<Installed> {
  const root = mkdtempSync(join(tmpdir(), 'zn-upenv-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  const cli = captureCli(work);
  const installHost = hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: fakeEnroller, probeControlPlane: healthyControlPlane({ version: OLD }) });
  if (!t.equal(await runInstall(['node', '--package', oldPkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_install'], cli.ctx, installHost), 0, `installed at ${OLD}`)) t.comment(cli.out());
  let redemptions = 0;
  const redeem: UpgradeTokenRedeemer = async (req) => {
    redemptions += 1;
    onRedeem();
    return { nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion };
  };
  return { root, services, redemptions: () => redemptions, host: hostEnv(root, { keyPem: keys.publicKeyPem, services, redeemUpgrade: redeem }) };
}

/** etc/node.env with its ZENOVA_NODE_LISTEN line replaced by `line` (removed when undefined). */
function setListenLine(root: string, line: string | undefined): void {
  const file = join(root, ENV);
  const lines = readFileSync(file, 'utf8').split('\n');
  writeFileSync(file, lines.flatMap((l) => (l.startsWith('ZENOVA_NODE_LISTEN=') ? (line === undefined ? [] : [line]) : [l])).join('\n'));
}

async function run(host: HostEnv, ...extra: string[]): Promise<{ exit: number; out: string }> {
  const cli = captureCli(work);
  const token = extra.includes('--check-only') ? [] : ['--token', 'tok_upgrade'];
  const exit = await runInstall(['node', '--package', newPkg.file, '--control-plane', 'https://cp.example.test', ...token, '--upgrade', ...extra], cli.ctx, host);
  return { exit, out: cli.out() + cli.err() };
}

/** --check-only --upgrade, then --upgrade: both refuse with `cause`, and neither redeems the token nor writes or restarts anything. */
async function refusedUpFront(t: Test, h: Installed, cause: RegExp): Promise<void> {
  const before = listTree(h.root);
  h.services.calls.length = 0;
  const check = await run(h.host, '--check-only');
  t.equal(check.exit, 1, '--check-only --upgrade exits 1');
  t.match(check.out, cause, '--check-only --upgrade names the env file');
  t.notMatch(check.out, /All checks passed/);
  const real = await run(h.host);
  t.equal(real.exit, 1, '--upgrade exits 1');
  t.match(real.out, cause, '--upgrade names the env file');
  t.match(real.out, /blocking finding.*; nothing was written/);
  t.match(real.out, /→ Nothing was changed and the token was not used\. Correct the line the cause names in <dir>\/etc\/node\.env/);
  t.equal(h.redemptions(), 0, 'the token was not redeemed');
  t.same(listTree(h.root), before, 'nothing was written');
  t.same(h.services.calls, [], 'the service was not touched');
}

t.test('a ZENOVA_NODE_LISTEN that is not HOST:PORT is a blocking finding of --check-only --upgrade and --upgrade, before the token is redeemed', async (t) => {
  const h = await installedAtOld(t);
  setListenLine(h.root, 'ZENOVA_NODE_LISTEN=7480');
  await refusedUpFront(t, h, /✗ NODE-UPGRADE-ENV: the installed node's listen address "7480" \(ZENOVA_NODE_LISTEN in \/opt\/zenova-node\/etc\/node\.env\) is not HOST:PORT/);
});

t.test('an etc/node.env without a ZENOVA_NODE_LISTEN line blocks the upgrade before the token is redeemed', async (t) => {
  const h = await installedAtOld(t);
  setListenLine(h.root, undefined);
  await refusedUpFront(t, h, /✗ NODE-UPGRADE-ENV: \/opt\/zenova-node\/etc\/node\.env gives no ZENOVA_NODE_LISTEN/);
});

t.test('a ZENOVA_NODE_TLS_CERT_FILE that cannot be read blocks the upgrade before the token is redeemed', async (t) => {
  const h = await installedAtOld(t);
  writeFileSync(join(h.root, ENV), `${readFileSync(join(h.root, ENV), 'utf8')}ZENOVA_NODE_TLS_CERT_FILE=/opt/zenova-node/etc/tls-cert.pem\n`);
  await refusedUpFront(t, h, /✗ NODE-UPGRADE-ENV: cannot read the node's TLS certificate \/opt\/zenova-node\/etc\/tls-cert\.pem \(ZENOVA_NODE_TLS_CERT_FILE in \/opt\/zenova-node\/etc\/node\.env\): ENOENT/);
});

t.test('a ZENOVA_NODE_TLS_CERT_FILE holding no PEM certificate blocks the upgrade before the token is redeemed', async (t) => {
  const h = await installedAtOld(t);
  writeFileSync(join(h.root, DIR, 'etc/tls-cert.pem'), 'not a certificate\n');
  writeFileSync(join(h.root, ENV), `${readFileSync(join(h.root, ENV), 'utf8')}ZENOVA_NODE_TLS_CERT_FILE=/opt/zenova-node/etc/tls-cert.pem\n`);
  await refusedUpFront(t, h, /✗ NODE-UPGRADE-ENV: the node's TLS certificate \/opt\/zenova-node\/etc\/tls-cert\.pem \(ZENOVA_NODE_TLS_CERT_FILE in \/opt\/zenova-node\/etc\/node\.env\) holds no usable PEM certificate/);
});

t.test('a usable etc/node.env passes the check, naming the address node-edge listens on', async (t) => {
  const h = await installedAtOld(t);
  const check = await run(h.host, '--check-only');
  t.equal(check.exit, 0);
  t.match(check.out, /✓ \/opt\/zenova-node\/etc\/node\.env: node-edge listens on 0\.0\.0\.0:7480 \(plain HTTP\)/);
});

t.test('an env file made unusable after the checks: node-edge is never restarted, no failed version is recorded and the run says the release never ran', async (t) => {
  let root = '';
  // The operator edits the file while the run redeems the token (after its checks, before its switch).
  const h = await installedAtOld(t, () => setListenLine(root, 'ZENOVA_NODE_LISTEN=7480'));
  root = h.root;
  const unit = readFileSync(join(h.root, 'etc/systemd/system/node-edge.service'), 'utf8');
  h.services.calls.length = 0;
  const r = await run(h.host);
  t.equal(r.exit, 1);
  t.equal(h.redemptions(), 1, 'the token was redeemed once');
  t.match(r.out, new RegExp(`✗ NODE-UPGRADE-ENV: node-edge\\.service was not restarted on ${NEW.replaceAll('.', '\\.')}, which never ran: the installed node's listen address "7480" \\(ZENOVA_NODE_LISTEN in /opt/zenova-node/etc/node\\.env\\) is not HOST:PORT`));
  t.match(r.out, /switched back: node-edge\.service was never stopped and runs 0\.0\.9 as before/);
  t.match(r.out, /Upgrade failed: NODE-UPGRADE-ENV: .*\n +→ The new release never ran: node-edge was never stopped and runs 0\.0\.9 as before\. .*issue a new upgrade command/);
  t.notMatch(r.out, /NODE-UPGRADE-ROLLED-BACK/, 'not reported as switched in, restarted and not ready');
  t.notMatch(r.out, /NODE-SERVICE-START/);
  t.notMatch(r.out, /--reenroll/, 'no first-install advice');
  t.notOk(h.services.calls.some((c) => /^(restart|stop|start) /.test(c)), `never restarted, stopped or started: ${h.services.calls.join(', ')}`);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${OLD}`);
  t.equal(readlinkSync(join(h.root, DIR, 'updater')), `releases/${OLD}`);
  t.equal(readFileSync(join(h.root, 'etc/systemd/system/node-edge.service'), 'utf8'), unit, 'the unit is as it was');
  t.match(readFileSync(join(h.root, ENV), 'utf8'), new RegExp(`^ZENOVA_NODE_VERSION=${OLD.replaceAll('.', '\\.')}$`, 'm'), 'the env file names the previous version again');
  t.notOk(existsSync(join(h.root, DIR, 'releases', NEW)), 'the new release is removed');
  const state = JSON.parse(readFileSync(join(h.root, DIR, 'data/update-state.json'), 'utf8'));
  t.match(state, { lastUpgrade: { from: OLD, to: NEW, outcome: 'rolled-back' } });
  t.notOk('inProgress' in state, 'the upgrade is over');
  t.notOk('failedVersion' in state, 'a release that never ran is not a failed version');
});

t.test('the previous release not ready after a switch back is told to restart node-edge and issue a new upgrade command, not to reenroll', async (t) => {
  const h = await installedAtOld(t);
  const r = await run({ ...h.host, waitReady: async () => ({ ready: false, reason: 'node-edge.service failed to start' }) });
  t.equal(r.exit, 1);
  t.equal(h.redemptions(), 1);
  t.match(r.out, /✗ NODE-SERVICE-START: node-edge\.service failed to start\n +→ 0\.0\.9 is switched back in \(current, units, env file\) but did not get ready either\. .*`systemctl restart node-edge`.*issue a new upgrade command/);
  t.notMatch(r.out, /--reenroll|installs the node again/, 'no first-install advice');
  t.match(r.out, /Upgrade failed: NODE-UPGRADE-ROLLED-BACK: .*and 0\.0\.9 is not ready either/);
  t.match(JSON.parse(readFileSync(join(h.root, DIR, 'data/update-state.json'), 'utf8')), { failedVersion: NEW }, 'the new release ran and was not ready: a failed version');
});
