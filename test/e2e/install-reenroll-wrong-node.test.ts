/**
 * `zenova install node --reenroll` with another live node's reenroll token (the wrong row's command
 * pasted on a host where node X serves), against a real control plane, with the fake service manager
 * whose `start` runs the real `zenova-node serve`: refused as NODE-TOKEN-REJECTED
 * (ZN_ERR_CP_TOKEN_WRONG_NODE) with advice naming the installed node; the other node keeps its
 * credential, data/ is left as it was, and node-edge runs on as X — never stopped when it served,
 * started again when the run had stopped it.
 */
import t from 'tap';
import type { Test } from 'tap';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { createNode, enrollNewNode, freePort, httpsMaterial, nodeView, startControlPlane, tempDir, tokenOf, tryControlStream } from './stack.js';
import { runInstall } from '../../installer/src/commands/install.js';
import { probeControlPlane } from '../../installer/src/install/control-plane-probe.js';
import { waitForReadiness } from '../../installer/src/install/readiness-wait.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { captureCli, fakeProbe } from '../installer/fake-host.js';
import { installedNodeServices } from './installed-node-services.js';
import { buildNodePackage, releaseKeys } from '../installer/package-builder.js';

const DATA = 'opt/zenova-node/data';
const UNIT = 'node-edge.service';

t.test('install --reenroll with another live node\'s token is refused, nothing revoked or moved, and node-edge runs on as the installed node', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-install-wrong-node-');
  const https = await httpsMaterial(join(work, 'https'));
  const cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw') });
  const keys = releaseKeys();
  const pkg = await buildNodePackage(work, keys);
  const port = await freePort();
  const root = join(work, 'host');
  mkdirSync(root);
  const { services, started } = installedNodeServices(t, { root, dataDir: DATA, port, name: 'node-edge (installed)' });
  const host: HostEnv = {
    hostRoot: root,
    probe: fakeProbe(),
    services,
    probeControlPlane,
    trustedKeyPem: async () => keys.publicKeyPem,
    waitReady: waitForReadiness,
    readyTimeoutMs: 45_000,
  };
  const install = async (args: string[]): Promise<{ exit: number; out: string }> => {
    const cli = captureCli(work);
    const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', cp.url, '--ca-file', https.caFile, '--listen', `127.0.0.1:${port}`, ...args], cli.ctx, host);
    return { exit, out: cli.out() + cli.err() };
  };

  const x = await createNode(cp, 'host-x');
  const installed = await install(['--token', tokenOf(x.install.command)]);
  if (!t.equal(installed.exit, 0, 'node host-x installed')) t.comment(installed.out);
  // Node Y, enrolled and serving elsewhere.
  const dirY = join(work, 'y');
  await enrollNewNode(t, cp, 'other-y', dirY);
  const idY = JSON.parse(readFileSync(join(dirY, 'identity.json'), 'utf8')) as { nodeId: string; gateway: { target: string; serverName: string; caPem: string } };
  const credY = (JSON.parse(readFileSync(join(dirY, 'credential.json'), 'utf8')) as { current: { secret: string } }).current.secret;
  const yAccepted = () => tryControlStream({ target: idY.gateway.target, serverName: idY.gateway.serverName, caPem: idY.gateway.caPem, nodeId: idY.nodeId, credential: credY });

  const identityX = readFileSync(join(root, DATA, 'identity.json'), 'utf8');
  const credentialX = readFileSync(join(root, DATA, 'credential.json'), 'utf8');
  const reenrollY = async (): Promise<string> => tokenOf((await cp.api<{ command: string }>('POST', '/api/v1/nodes/other-y/reenroll-command', {})).body.command);
  /** The installed node is connected again after `since`: its heartbeats arrive. */
  const heartbeatAfter = (since: number) => waitFor(async () => {
    const v = await nodeView(cp, 'host-x');
    return v.lastHeartbeatAt !== null && Date.parse(v.lastHeartbeatAt) > since ? v : undefined;
  }, { what: 'a heartbeat of host-x after the refusal', timeoutMs: 30_000 });

  const checkRefused = (t: Test, r: { exit: number; out: string }): void => {
    t.equal(r.exit, 1, 'exit 1');
    t.match(r.out, /✗ NODE-TOKEN-REJECTED: .*another node than node host-x \(.*\), which this host holds.*ZN_ERR_CP_TOKEN_WRONG_NODE/);
    t.match(r.out, 'Run the reenroll command of the node this host holds');
    t.equal(readFileSync(join(root, DATA, 'identity.json'), 'utf8'), identityX, 'the identity is kept');
    t.equal(readFileSync(join(root, DATA, 'credential.json'), 'utf8'), credentialX, 'the credential is kept');
    t.notOk(existsSync(join(root, DATA, 'retired')), 'nothing moved into retired/');
  };

  await t.test('node-edge serving: it is never stopped', async (t) => {
    t.equal(services.states.get(UNIT), 'active');
    const callsBefore = services.calls.length;
    const processes = started.length;
    const at = Date.now();
    const r = await install(['--reenroll', '--token', await reenrollY()]);
    checkRefused(t, r);
    t.match(r.out, `${UNIT} was never stopped: it serves on with its previous identity`);
    t.notOk(services.calls.slice(callsBefore).some((c) => /^(stop|restart|start) /.test(c)), `${UNIT} was not stopped or restarted`);
    t.equal(started.length, processes, 'the same node-edge process serves');
    t.same(await yAccepted(), { accepted: true }, 'the token\'s node keeps its credential');
    await heartbeatAfter(at);
  });

  await t.test('node-edge not active: the run stops it, and starts it again as the installed node', async (t) => {
    await services.stop(UNIT);
    const at = Date.now();
    const r = await install(['--reenroll', '--token', await reenrollY()]);
    checkRefused(t, r);
    t.match(r.out, `${UNIT} started again with its previous identity`);
    t.equal(services.states.get(UNIT), 'active');
    t.same(await yAccepted(), { accepted: true }, 'the token\'s node keeps its credential');
    await heartbeatAfter(at);
  });
});
