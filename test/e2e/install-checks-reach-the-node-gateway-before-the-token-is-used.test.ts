/**
 * Nodes enroll over the control plane's HTTPS, then live on its node gateway (gRPC over TLS, its own
 * port). `zenova install node`'s checks (`--check-only`, and before a token is redeemed) reach that
 * gateway as the control link will: the preflight answer names it as enrollment will hand it out,
 * a port nothing listens on blocks with NODE-CP-GATEWAY (the token left unused), a listening gateway
 * passes with its TLS verified, a loopback gateway address while the control plane is reached by
 * another name blocks with NODE-CP-GATEWAY-LOOPBACK, and an older control plane's answer without the
 * field is a warning. Real control-plane processes over HTTPS (two replicas on one database, one
 * telling nodes to dial a closed port: a firewalled gateway as the node's host sees it), a real
 * CONNECT proxy that alone resolves the control plane's other name, the installer in process.
 */
import t from 'tap';
import type { Test } from 'tap';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Agent, fetch } from 'undici';
import { runInstall } from '../../installer/src/commands/install.js';
import { probeControlPlane } from '../../installer/src/install/control-plane-probe.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { enroll } from '../../edge-node/src/enroll/enroll.js';
import { PROTOCOL_VERSION } from '../../proto/src/index.js';
import { productVersion } from '../../proto/src/product-version.js';
import { testDatabase } from '../fixtures/postgres.js';
import { startConnectProxy } from '../fixtures/connect-proxy.js';
import { closedPort } from '../fixtures/loopback-server.js';
import { captureCli, fakePreflightServer, hostEnv, listTree } from '../installer/fake-host.js';
import { buildNodePackage, releaseKeys } from '../installer/package-builder.js';
import { createNode, httpsMaterial, startControlPlane, tempDir, tokenOf } from './stack.js';

// A name no DNS knows: only the test proxy resolves it, so the control plane is reached by a
// non-loopback name while its gateway address (the default) names loopback.
const ZONE_NAME = 'cp.zone-b.invalid';
const PROXY_VARIABLES = ['https_proxy', 'HTTPS_PROXY', 'http_proxy', 'HTTP_PROXY', 'no_proxy', 'NO_PROXY'];

const db = await testDatabase(t);
const work = tempDir(t, 'zn-e2e-gw-check-');
const https = await httpsMaterial(join(work, 'https'), { dnsNames: ['localhost', ZONE_NAME], ipAddresses: ['127.0.0.1'] });
const cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw') });
const closed = await closedPort();
// A replica on the same database (same nodes and tokens, same gateway identity) whose nodes are told
// to dial a port nothing listens on.
const firewalled = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw-2'), env: { ZENOVA_GATEWAY_PUBLIC_ADDRESS: `127.0.0.1:${closed}` } });
const keys = releaseKeys();
const pkg = await buildNodePackage(work, keys);
const gatewayCaPem = readFileSync(join(work, 'gw', 'ca.crt'), 'utf8');

/** Exactly `vars` among the proxy variables for this test; the rest restored after it. */
function proxyEnv(t: Test, vars: Record<string, string>): void {
  const saved = Object.fromEntries(PROXY_VARIABLES.map((name) => [name, process.env[name]]));
  for (const name of PROXY_VARIABLES) delete process.env[name];
  Object.assign(process.env, vars);
  t.teardown(() => {
    for (const name of PROXY_VARIABLES) {
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    }
  });
}

function freshHost(t: Test): { root: string; host: HostEnv } {
  const root = tempDir(t, 'zn-e2e-gw-check-host-');
  return { root, host: hostEnv(root, { keyPem: keys.publicKeyPem, probeControlPlane }) };
}

async function install(host: HostEnv, url: string, args: string[], caFile = https.caFile): Promise<{ exit: number; out: string }> {
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', url, '--ca-file', caFile, ...args], cli.ctx, host);
  return { exit, out: cli.out() + cli.err() };
}

async function preflight(url: string): Promise<Record<string, unknown>> {
  const agent = new Agent({ connect: { ca: https.caPem } });
  try {
    const res = await fetch(`${url}/api/enroll/preflight`, { dispatcher: agent });
    return (await res.json()) as Record<string, unknown>;
  } finally {
    await agent.close();
  }
}

// The host's own proxy variables would route these checks elsewhere: none, but where a test sets them.
proxyEnv(t, {});

t.test('the preflight answer names the node gateway, its server name and the CA nodes pin', async (t) => {
  t.same((await preflight(cp.url)).gateway, { target: `localhost:${cp.gatewayPort}`, serverName: 'localhost', caPem: gatewayCaPem });
  t.same((await preflight(firewalled.url)).gateway, { target: `127.0.0.1:${closed}`, serverName: '127.0.0.1', caPem: gatewayCaPem }, 'ZENOVA_GATEWAY_PUBLIC_ADDRESS is what nodes are told');
});

t.test('--check-only passes when the node gateway listens, its certificate verified against the CA the node will pin', async (t) => {
  const { host } = freshHost(t);
  const r = await install(host, cp.url, ['--check-only']);
  if (!t.equal(r.exit, 0, 'exit 0')) t.comment(r.out);
  t.match(r.out, new RegExp(`✓ node gateway localhost:${cp.gatewayPort} reachable over TCP and TLS \\(certificate trusted by the gateway CA pinned at enrollment, valid for "localhost"\\)`));
  t.notMatch(r.out, /NODE-CP-GATEWAY/);
});

t.test('--check-only blocks on a gateway port nothing listens on, naming that host:port and the port nodes need open', async (t) => {
  const { root, host } = freshHost(t);
  const before = listTree(root);
  const r = await install(host, firewalled.url, ['--check-only']);
  t.equal(r.exit, 1, 'exit 1');
  t.match(r.out, /✓ control plane 127\.0\.0\.1:\d+ reachable over HTTPS/, 'the HTTPS check alone passes');
  t.match(r.out, new RegExp(`✗ NODE-CP-GATEWAY: cannot open a TCP connection to the control plane's node gateway at 127\\.0\\.0\\.1:${closed}: .*ECONNREFUSED`));
  t.match(r.out, new RegExp(`→ Nodes reach the control plane on two ports: .* the node gateway's, 127\\.0\\.0\\.1:${closed} \\(gRPC over TLS, default port 8443\\).* Open 127\\.0\\.0\\.1:${closed} from this host`));
  t.match(r.out, /1 blocking finding; nothing was written/);
  t.same(listTree(root), before, 'nothing written');
});

t.test('an install with a token stops before redeeming it when the gateway port is closed: the token enrolls afterwards', async (t) => {
  const created = await createNode(cp, 'gw-closed');
  const token = tokenOf(created.install.command);
  const { root, host } = freshHost(t);
  const before = listTree(root);
  const r = await install(host, firewalled.url, ['--token', token]);
  t.equal(r.exit, 1, 'exit 1');
  t.match(r.out, new RegExp(`✗ NODE-CP-GATEWAY: .*127\\.0\\.0\\.1:${closed}`));
  t.notMatch(r.out, /enrolled as node/);
  t.same(listTree(root), before, 'nothing written');

  // The token was not used: it enrolls now, and the node is handed the gateway the preflight named.
  const stateDir = join(work, 'state-gw-closed');
  const enrolled = await enroll({ controlPlaneUrl: cp.url, token, stateDir, caPem: https.caPem, reenroll: false });
  t.equal(enrolled.nodeName, 'gw-closed', 'the token still enrolls');
  const identity = JSON.parse(readFileSync(join(stateDir, 'identity.json'), 'utf8')) as { gateway: unknown };
  t.same(identity.gateway, { target: `localhost:${cp.gatewayPort}`, serverName: 'localhost', caPem: gatewayCaPem }, 'enrollment hands out what the preflight named');
});

t.test('a loopback gateway address blocks when the control plane is reached by another name, without dialling it', async (t) => {
  const proxy = await startConnectProxy(t, { [ZONE_NAME]: '127.0.0.1' });
  proxyEnv(t, { https_proxy: proxy.url });
  const { root, host } = freshHost(t);
  // node-edge would get the proxy from a drop-in (else NODE-CP-PROXY-SERVICE): this test is about the gateway.
  mkdirSync(join(root, 'etc/systemd/system/node-edge.service.d'), { recursive: true });
  writeFileSync(join(root, 'etc/systemd/system/node-edge.service.d/proxy.conf'), `[Service]\nEnvironment=https_proxy=${proxy.url}\n`);
  const port = new URL(cp.url).port;
  const r = await install(host, `https://${ZONE_NAME}:${port}`, ['--check-only']);
  t.equal(r.exit, 1, 'exit 1');
  t.match(r.out, new RegExp(`✓ control plane ${ZONE_NAME.replaceAll('.', '\\.')}:${port} reachable over HTTPS`));
  t.match(r.out, new RegExp(`✗ NODE-CP-GATEWAY-LOOPBACK: the control plane at ${ZONE_NAME.replaceAll('.', '\\.')}:${port} tells nodes to dial its node gateway at localhost:${cp.gatewayPort}, a loopback address`));
  t.match(r.out, /→ .*ZENOVA_GATEWAY_HOSTS.*ZENOVA_GATEWAY_PUBLIC_ADDRESS/);
  t.match(r.out, /1 blocking finding; nothing was written/);
  t.same(proxy.connects, [`CONNECT ${ZONE_NAME}:${port}`], 'only the control plane was dialled');
});

t.test('an older control plane whose preflight answer names no gateway: the check is skipped with a warning', async (t) => {
  const now = new Date();
  const old = await fakePreflightServer(t, () => ({ product: 'zenova-gateway', version: productVersion(), protocolVersion: PROTOCOL_VERSION, serverTime: now.toISOString(), serverTimeMs: Date.now() }));
  const caFile = join(work, 'old-cp-ca.pem');
  writeFileSync(caFile, old.caPem);
  const { host } = freshHost(t);
  const r = await install(host, old.url, ['--check-only'], caFile);
  if (!t.equal(r.exit, 0, 'exit 0: a warning only')) t.comment(r.out);
  t.match(r.out, /! NODE-CP-GATEWAY-UNCHECKED: the control plane \(version [^)]+\) does not say where nodes dial its node gateway, so that port was not checked/);
  t.match(r.out, /All checks passed/);
});
