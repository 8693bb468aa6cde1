/**
 * `zenova install node` end to end against a real control plane, with a fake service manager
 * whose `start` runs the real `zenova-node serve` on the installed data dir (the systemd-nspawn
 * test with real systemd comes with the packaging work). Covers: install up to enrollment,
 * readiness and a real call; `zenova status --json`; a second install refused with nothing
 * changed; a used token refused and rolled back; --reenroll keeping the data dir's other files.
 */
import t from 'tap';
import { chmodSync, existsSync, mkdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { testDatabase } from '../fixtures/postgres.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { callNode, configureDemo, createNode, freePort, httpsMaterial, nodeView, startControlPlane, tempDir, tokenOf } from './stack.js';
import { runInstall } from '../../installer/src/commands/install.js';
import { runStatus } from '../../installer/src/commands/status.js';
import { probeControlPlane } from '../../installer/src/install/control-plane-probe.js';
import { waitForReadiness } from '../../installer/src/install/readiness-wait.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { captureCli, fakeProbe, fakeServices, listTree } from '../installer/fake-host.js';
import { installedNodeServices } from './installed-node-services.js';
import { buildNodePackage, releaseKeys } from '../installer/package-builder.js';

const DATA = 'opt/zenova-node/data';

t.test('install, status, second install, used token and --reenroll against a real control plane', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-install-');
  const https = await httpsMaterial(join(work, 'https'));
  const cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw') });
  const upstream = await startFakeUpstream(t);
  const { apiKey } = await configureDemo(cp, upstream.url);
  const keys = releaseKeys();
  const pkg = await buildNodePackage(work, keys);
  const port = await freePort();

  const root = join(work, 'host');
  mkdirSync(root);
  const { services } = installedNodeServices(t, { root, dataDir: DATA, port, name: 'node-edge (installed)' });
  const host: HostEnv = {
    hostRoot: root,
    probe: fakeProbe(),
    services,
    probeControlPlane,
    trustedKeyPem: async () => keys.publicKeyPem,
    waitReady: waitForReadiness,
    readyTimeoutMs: 45_000,
  };
  const install = async (args: string[], env: HostEnv = host): Promise<{ exit: number; out: string }> => {
    const cli = captureCli(work);
    // A test's own --listen replaces the default (an option given twice is a usage error).
    const listen = args.includes('--listen') ? [] : ['--listen', `127.0.0.1:${port}`];
    const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', cp.url, '--ca-file', https.caFile, ...listen, ...args], cli.ctx, env);
    return { exit, out: cli.out() + cli.err() };
  };

  const created = await createNode(cp, 'hosted');
  const token = tokenOf(created.install.command);
  const tokenFile = join(work, 'node.token');
  writeFileSync(tokenFile, `${token}\n`);
  chmodSync(tokenFile, 0o644);

  await t.test('the install enrolls, writes the layout and units, starts node-edge and waits until ready', async (t) => {
    const r = await install(['--token-file', tokenFile]);
    if (!t.equal(r.exit, 0, 'exit 0')) t.comment(r.out);
    t.match(r.out, /! NODE-TOKEN-FILE-MODE: the token file .* is readable by group or others/);
    t.match(r.out, /✓ enrolled as node hosted/);
    t.match(r.out, /✓ node-edge ready/);
    t.notMatch(r.out, new RegExp(token), 'the token is never printed');
    t.equal(readlinkSync(join(root, 'opt/zenova-node/current')), `releases/${pkg.manifest.version}`);
    t.ok(existsSync(join(root, 'opt/zenova-node/releases', pkg.manifest.version, 'bin/zenova-node')));
    t.ok(existsSync(join(root, DATA, 'identity.json')), 'identity in data/');
    t.match(readFileSync(join(root, 'opt/zenova-node/etc/node.env'), 'utf8'), `ZENOVA_NODE_LISTEN=127.0.0.1:${port}`);
    const unit = readFileSync(join(root, 'etc/systemd/system/node-edge.service'), 'utf8');
    for (const line of ['Type=notify', 'ProtectSystem=strict', 'NoNewPrivileges=true', 'Restart=always', 'ReadWritePaths=/opt/zenova-node/data', 'EnvironmentFile=/opt/zenova-node/etc/node.env']) {
      t.match(unit, line, `node-edge.service has ${line}`);
    }
    t.match(readFileSync(join(root, 'etc/systemd/system/zenova-node-update.service'), 'utf8'), 'Type=oneshot');
    t.same(services.calls, ['write node-edge.service', 'write zenova-node-update.service', 'daemon-reload', 'enable node-edge.service', 'start node-edge.service']);
    await waitFor(async () => (await nodeView(cp, 'hosted')).onboardingStage === 'config-synced', { what: 'config-synced', timeoutMs: 20_000 });
    t.equal(await callNode(`http://127.0.0.1:${port}`, apiKey), 200, 'a real call through the installed node works');
  });

  await t.test('zenova status --json shows the identity, version, service and readiness', async (t) => {
    const cli = captureCli(work);
    const exit = await runStatus(['--json'], cli.ctx, host);
    t.equal(exit, 0, 'exit 0');
    const status = JSON.parse(cli.out());
    t.match(status, {
      installed: true,
      installDir: '/opt/zenova-node',
      version: pkg.manifest.version,
      service: { unit: 'node-edge.service', state: 'active' },
      readiness: { ready: true },
      node: { enrolled: true, node: { name: 'hosted' }, controlPlaneUrl: cp.url },
    });
    const text = captureCli(work);
    await runStatus([], text.ctx, host);
    t.match(text.out(), /hosted/);
    t.match(text.out(), /readiness: +ready/);
  });

  await t.test('a second install is refused and changes nothing', async (t) => {
    await services.stop('node-edge.service'); // the live node writes its status file; hold it still
    const again = await cp.api<{ command: string }>('POST', '/api/v1/nodes/hosted/install-command', {});
    const before = listTree(root);
    const r = await install(['--token', tokenOf(again.body.command)]);
    t.equal(r.exit, 1);
    t.match(r.out, /A gateway node is already installed on this host/);
    t.match(r.out, /✗ NODE-INSTALLED/);
    t.same(listTree(root), before);
  });

  await t.test('a used token on a fresh host is refused as NODE-TOKEN-REJECTED and everything is rolled back', async (t) => {
    const other = join(work, 'host-2');
    mkdirSync(other);
    const otherServices = fakeServices(other);
    const before = listTree(other);
    const r = await install(['--token', token, '--listen', '127.0.0.1:1'], { ...host, hostRoot: other, services: otherServices });
    if (!t.equal(r.exit, 1, 'exit 1')) t.comment(r.out);
    t.match(r.out, /✗ NODE-TOKEN-REJECTED: the token was already used/);
    t.match(r.out, /rolled back/);
    t.same(listTree(other), before, 'nothing left behind');
    t.same(otherServices.calls, [], 'no unit was touched');
  });

  await t.test('--reenroll replaces the identity and keeps the rest of data/', async (t) => {
    await services.start('node-edge.service');
    const spoolMarker = join(root, DATA, 'spool-marker.bin');
    writeFileSync(spoolMarker, 'unsent records');
    const identityBefore = readFileSync(join(root, DATA, 'identity.json'), 'utf8');
    const reenroll = await cp.api<{ command: string }>('POST', '/api/v1/nodes/hosted/reenroll-command', {});
    const r = await install(['--reenroll', '--token', tokenOf(reenroll.body.command)]);
    if (!t.equal(r.exit, 0, 'exit 0')) t.comment(r.out);
    t.match(r.out, /✓ re-enrolled as node hosted/);
    t.not(readFileSync(join(root, DATA, 'identity.json'), 'utf8'), identityBefore, 'a new identity');
    t.equal(readFileSync(spoolMarker, 'utf8'), 'unsent records', 'the spool is kept');
    t.equal(await callNode(`http://127.0.0.1:${port}`, apiKey), 200);
  });
});
