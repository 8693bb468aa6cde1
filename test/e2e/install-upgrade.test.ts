/**
 * `zenova install node --upgrade` end to end against a real control plane (DESIGN §8, seed 004
 * §9.6), with the fake service manager of install-node.test.ts: its `start` runs the real
 * `zenova-node serve` on the installed data dir, except when the release `current` links to carries
 * `app/broken-release` (a release whose node-edge never gets ready: the unit fails).
 *
 * The installed "older release" is written by the real installer from a package of an older
 * version, against a control-plane probe that reports that version (as the control plane did when
 * the node was installed); the upgrade then runs against the real probe and the real control plane.
 */
import t from 'tap';
import type { Test } from 'tap';
import { existsSync, mkdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { testDatabase } from '../fixtures/postgres.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import type { StartedProcess } from '../fixtures/processes.js';
import { callNode, configureDemo, createNode, freePort, httpsMaterial, startControlPlane, tempDir, tokenOf } from './stack.js';
import type { ControlPlane } from './stack.js';
import { runInstall } from '../../installer/src/commands/install.js';
import { runStatus } from '../../installer/src/commands/status.js';
import { probeControlPlane } from '../../installer/src/install/control-plane-probe.js';
import type { ControlPlaneProbe } from '../../installer/src/install/control-plane-probe.js';
import { waitForReadiness } from '../../installer/src/install/readiness-wait.js';
import { compareReleaseVersions } from '../../installer/src/install/installed-node.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { captureCli, fakeProbe, fakeServices } from '../installer/fake-host.js';
import type { FakeServices } from '../installer/fake-host.js';
import { installedNodeServices } from './installed-node-services.js';
import { buildNodePackage, defaultPackageEntries, releaseKeys } from '../installer/package-builder.js';
import { productVersion } from '../../proto/src/product-version.js';

const DIR = 'opt/zenova-node';
const DATA = `${DIR}/data`;
const OLD = '0.0.9';
const NEW = productVersion();

/** The control plane as it answered when the node was installed: running `version`. */
function probeReporting(version: string): ControlPlaneProbe {
  return async (url, caPem, caFile) => {
    const real = await probeControlPlane(url, caPem, caFile);
    return real.ok ? { ...real, facts: { ...real.facts, version } } : real;
  };
}

interface UpgradeHost {
  root: string;
  port: number;
  services: FakeServices;
  host: HostEnv;
  /** Every node-edge process the fake service manager started, in order. */
  started: StartedProcess[];
}

async function hostWithNode(t: Test, work: string, name: string): Promise<UpgradeHost> {
  const root = join(work, name);
  mkdirSync(root);
  const port = await freePort();
  const { services, started } = installedNodeServices(t, { root, dataDir: DATA, port, name: `node-edge (${name})`, refuses: () => existsSync(join(root, DIR, 'current/app/broken-release')) });
  const host: HostEnv = {
    hostRoot: root,
    probe: fakeProbe(),
    services,
    probeControlPlane,
    trustedKeyPem: async () => KEYS.publicKeyPem,
    waitReady: waitForReadiness,
    readyTimeoutMs: 45_000,
  };
  return { root, port, services, host, started };
}

const KEYS = releaseKeys();

async function runCli(work: string, host: HostEnv, args: string[]): Promise<{ exit: number; out: string }> {
  const cli = captureCli(work);
  const exit = await runInstall(['node', ...args], cli.ctx, host);
  return { exit, out: cli.out() + cli.err() };
}

/** Installs `name` at version OLD on `h` (the real installer, a probe saying the control plane ran OLD). */
async function installOld(t: Test, work: string, cp: ControlPlane, h: UpgradeHost, name: string, caFile: string): Promise<void> {
  const old = await buildNodePackage(work, KEYS, { name: `old-${name}.zpkg`, version: OLD });
  const created = await createNode(cp, name);
  const r = await runCli(work, { ...h.host, probeControlPlane: probeReporting(OLD) }, [
    '--package', old.file, '--control-plane', cp.url, '--ca-file', caFile, '--listen', `127.0.0.1:${h.port}`, '--token', tokenOf(created.install.command),
  ]);
  if (!t.equal(r.exit, 0, `${name} installed at ${OLD}`)) t.comment(r.out);
}

async function upgradeToken(cp: ControlPlane, name: string, kind: 'upgrade' | 'install' = 'upgrade'): Promise<string> {
  const issued = await cp.api<{ command: string }>('POST', `/api/v1/nodes/${name}/${kind}-command`, {});
  if (issued.status !== 200) throw new Error(`${kind}-command for ${name}: HTTP ${issued.status}`);
  return tokenOf(issued.body.command);
}

const read = (h: UpgradeHost, file: string): string => readFileSync(join(h.root, file), 'utf8');

t.test('zenova install node --upgrade against a real control plane', async (t) => {
  t.equal(compareReleaseVersions(NEW, OLD), 1, `this release (${NEW}) is newer than the stand-in old one (${OLD})`);
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-upgrade-');
  const https = await httpsMaterial(join(work, 'https'));
  const cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw') });
  const upstream = await startFakeUpstream(t);
  const { apiKey } = await configureDemo(cp, upstream.url);
  const pkg = await buildNodePackage(work, KEYS, { name: 'zenova-node.zpkg' });
  const broken = await buildNodePackage(work, KEYS, {
    name: 'broken.zpkg',
    entries: [...defaultPackageEntries(), { path: 'app/broken-release', mode: 0o644, content: Buffer.from('node-edge of this release never gets ready\n') }],
  });

  const ok = await hostWithNode(t, work, 'host-ok');
  await installOld(t, work, cp, ok, 'up-ok', https.caFile);
  const rb = await hostWithNode(t, work, 'host-rb');
  await installOld(t, work, cp, rb, 'up-rb', https.caFile);

  await t.test('an upgrade switches to the new release, keeps the identity and data, and the node serves', async (t) => {
    const identity = read(ok, `${DATA}/identity.json`);
    const credential = read(ok, `${DATA}/credential.json`);
    const token = await upgradeToken(cp, 'up-ok');
    ok.services.calls.length = 0;
    // No --ca-file: the installed node's CA for the control plane is used.
    const r = await runCli(work, ok.host, ['--package', pkg.file, '--control-plane', cp.url, '--token', token, '--upgrade']);
    if (!t.equal(r.exit, 0, 'exit 0')) t.comment(r.out);
    t.match(r.out, `✓ gateway node up-ok installed in /${DIR} (version ${OLD})`);
    t.match(r.out, `✓ upgrade from ${OLD} to ${NEW}`);
    t.match(r.out, /✓ upgrade token redeemed/);
    t.match(r.out, new RegExp(`✓ node-edge.service restarted on ${NEW.replace(/\./g, '\\.')} and ready`));
    t.match(r.out, `is upgraded from ${OLD} to ${NEW} and ready`);
    t.notMatch(r.out, token, 'the token is never printed');
    t.equal(readlinkSync(join(ok.root, DIR, 'current')), `releases/${NEW}`);
    t.equal(readlinkSync(join(ok.root, DIR, 'updater')), `releases/${NEW}`);
    t.ok(existsSync(join(ok.root, DIR, 'releases', OLD, 'bin/zenova-node')), 'the previous release is kept for a manual switch back');
    const env = read(ok, `${DIR}/etc/node.env`);
    t.match(env, `ZENOVA_NODE_VERSION=${NEW}\n`);
    t.match(env, `ZENOVA_NODE_LISTEN=127.0.0.1:${ok.port}\n`, 'the listen address is kept');
    t.equal(read(ok, `${DATA}/identity.json`), identity, 'the identity is kept');
    t.equal(read(ok, `${DATA}/credential.json`), credential, 'the credential is kept');
    t.match(JSON.parse(read(ok, `${DATA}/update-state.json`)), { lastUpgrade: { from: OLD, to: NEW, outcome: 'ready' } });
    t.notOk('failedVersion' in JSON.parse(read(ok, `${DATA}/update-state.json`)));
    t.same(ok.services.calls, ['write node-edge.service', 'write zenova-node-update.service', 'daemon-reload', 'restart node-edge.service']);
    t.equal(await callNode(`http://127.0.0.1:${ok.port}`, apiKey), 200, 'a real call through the upgraded node works');
    const status = captureCli(work);
    t.equal(await runStatus(['--json'], status.ctx, ok.host), 0);
    t.match(JSON.parse(status.out()), { version: NEW, lastUpgrade: { from: OLD, to: NEW, outcome: 'ready' }, readiness: { ready: true, controlPlaneConnected: true } }, 'zenova status shows the upgrade');
  });

  await t.test('the same command again is refused before its token: the node already runs that version', async (t) => {
    const token = await upgradeToken(cp, 'up-ok');
    const r = await runCli(work, ok.host, ['--package', pkg.file, '--control-plane', cp.url, '--token', token, '--upgrade']);
    t.equal(r.exit, 1);
    t.match(r.out, `✗ NODE-UPGRADE-VERSION: the installed node already runs version ${NEW}`);
    t.match(r.out, /nothing was written/);
    // The token was not used: it still upgrades… nothing, but the control plane still takes it.
    const again = await runCli(work, rb.host, ['--package', pkg.file, '--control-plane', cp.url, '--token', token, '--upgrade']);
    t.match(again.out, /✗ NODE-TOKEN-REJECTED: the token was issued for another node/, 'refused as another node\'s token, not as used');
    t.equal(readlinkSync(join(rb.root, DIR, 'current')), `releases/${OLD}`, 'nothing was switched');
    t.notOk(existsSync(join(rb.root, DIR, 'releases', NEW)), 'the unpacked release is removed again');
  });

  await t.test('a release that never gets ready is switched back and recorded as failed; the node serves on the old one', async (t) => {
    const token = await upgradeToken(cp, 'up-rb');
    const before = rb.started.length;
    const r = await runCli(work, rb.host, ['--package', broken.file, '--control-plane', cp.url, '--ca-file', https.caFile, '--token', token, '--upgrade']);
    if (!t.equal(r.exit, 1, 'exit 1')) t.comment(r.out);
    t.match(r.out, `✗ NODE-UPGRADE-ROLLED-BACK: node-edge.service on ${NEW} was not ready: node-edge.service failed to start`);
    t.match(r.out, `switched back: node-edge.service runs ${OLD} again and is ready`);
    t.match(r.out, /issue a new upgrade command/);
    t.equal(readlinkSync(join(rb.root, DIR, 'current')), `releases/${OLD}`);
    t.equal(readlinkSync(join(rb.root, DIR, 'updater')), `releases/${OLD}`);
    t.notOk(existsSync(join(rb.root, DIR, 'releases', NEW)), 'the failed release is removed');
    t.match(read(rb, `${DIR}/etc/node.env`), `ZENOVA_NODE_VERSION=${OLD}\n`);
    t.match(JSON.parse(read(rb, `${DATA}/update-state.json`)), { failedVersion: NEW, lastUpgrade: { from: OLD, to: NEW, outcome: 'rolled-back' } });
    t.equal(rb.started.length, before + 1, 'the old release was started again once');
    t.equal(await callNode(`http://127.0.0.1:${rb.port}`, apiKey), 200, 'the node serves again on the old release');

    const rerun = await runCli(work, rb.host, ['--package', pkg.file, '--control-plane', cp.url, '--token', token, '--upgrade']);
    t.equal(rerun.exit, 1);
    t.match(rerun.out, /✗ NODE-TOKEN-REJECTED: the token was already used/, 'the same command again is refused: its token is used');
    t.equal(readlinkSync(join(rb.root, DIR, 'current')), `releases/${OLD}`, 'nothing was switched');
  });

  await t.test('an install token is refused for an upgrade and nothing is switched', async (t) => {
    const token = await upgradeToken(cp, 'up-rb', 'install');
    const r = await runCli(work, rb.host, ['--package', pkg.file, '--control-plane', cp.url, '--token', token, '--upgrade']);
    t.equal(r.exit, 1);
    t.match(r.out, /✗ NODE-TOKEN-REJECTED: the token is not an upgrade token/);
    t.match(r.out, /Nothing was switched/);
    t.equal(readlinkSync(join(rb.root, DIR, 'current')), `releases/${OLD}`);
    t.equal(await callNode(`http://127.0.0.1:${rb.port}`, apiKey), 200);
  });

  await t.test('a host without an installed node is told to install, not upgrade', async (t) => {
    const empty = join(work, 'host-empty');
    mkdirSync(empty);
    const token = await upgradeToken(cp, 'up-rb');
    const r = await runCli(work, { ...ok.host, hostRoot: empty, services: fakeServices(empty) }, ['--package', pkg.file, '--control-plane', cp.url, '--ca-file', https.caFile, '--token', token, '--upgrade']);
    t.equal(r.exit, 1);
    t.match(r.out, /✗ NODE-UPGRADE-NONE: no gateway node is installed on this host/);
  });
});
