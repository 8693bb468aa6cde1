// The node's one proxy policy, against a real local CONNECT proxy: enrollment, the installer's probe,
// doctor's gateway checks and the gRPC control link take the proxy of https_proxy / HTTPS_PROXY
// (lowercase winning), skip it for no_proxy / NO_PROXY hosts, and name the proxy (host:port only)
// when it refuses.
import t from 'tap';
import type { Test } from 'tap';
import { runSession } from '../../edge-node/src/control/session.js';
import type { SessionOptions } from '../../edge-node/src/control/session.js';
import { runDoctor } from '../../edge-node/src/doctor/doctor.js';
import { enroll } from '../../edge-node/src/enroll/enroll.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { bypassesProxy, configuredProxy } from '../../edge-node/src/net/proxy-policy.js';
import { probeControlPlane } from '../../installer/src/install/control-plane-probe.js';
import { startConnectProxy } from '../fixtures/connect-proxy.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import type { EnrolledState } from './control-fixtures.js';
import { startEnrollServer } from './enroll-fixtures.js';

// A name no DNS knows: only the test proxy resolves it (as a zone's proxy resolves internal names).
const ZONE_NAME = 'cp.zone-b.invalid';
const PROXY_VARIABLES = ['https_proxy', 'HTTPS_PROXY', 'http_proxy', 'HTTP_PROXY', 'no_proxy', 'NO_PROXY', 'grpc_proxy', 'no_grpc_proxy'];
const TOKEN = 'zn_it_proxy_route_token';

/** Sets exactly `vars` among the proxy variables for this test, and restores the rest after it. */
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

function silentLogger(): ReturnType<typeof createLogger> {
  return createLogger({ level: 'error', destination: { write: () => undefined } });
}

function sessionOptions(state: EnrolledState): SessionOptions {
  return {
    identity: state.identity,
    credential: state.credentials.current,
    facts: { version: '0.1.0', hostname: 'edge-host-1', arch: 'x64' },
    figures: () => ({ requests5m: 0, errors5m: 0, spoolBytes: 0, backfillBacklog: 0, appliedConfigVersion: 0, ready: true }),
    storeRotatedCredential: async () => undefined,
    logger: silentLogger(),
  };
}

t.test('enrollment goes through https_proxy to a control plane whose name only the proxy resolves', async (t) => {
  const server = await startEnrollServer(t, { names: { dnsNames: [ZONE_NAME], ipAddresses: [] } });
  const proxy = await startConnectProxy(t, { [ZONE_NAME]: '127.0.0.1' });
  proxyEnv(t, { https_proxy: proxy.url });
  const result = await enroll({ controlPlaneUrl: `https://${ZONE_NAME}:${server.port}`, token: TOKEN, stateDir: t.testdir({}), caPem: server.ca.certPem, reenroll: false });
  t.equal(result.nodeName, 'edge-1');
  t.same(proxy.connects, [`CONNECT ${ZONE_NAME}:${server.port}`, `CONNECT ${ZONE_NAME}:${server.port}`], 'preflight and enroll each through the proxy');
  t.same(server.requests.map((r) => r.path), ['/api/enroll/preflight', '/api/enroll']);
});

t.test('the uppercase HTTPS_PROXY is honoured too, with user:pass sent to the proxy and never shown', async (t) => {
  const server = await startEnrollServer(t, { names: { dnsNames: [ZONE_NAME], ipAddresses: [] } });
  const proxy = await startConnectProxy(t, { [ZONE_NAME]: '127.0.0.1' });
  proxyEnv(t, { HTTPS_PROXY: `http://zone%40user:s3cret-pw@${proxy.address}` });
  const probe = await probeControlPlane(`https://${ZONE_NAME}:${server.port}`, server.ca.certPem, { path: 'ca.pem', installed: false });
  t.equal(probe.ok, true, JSON.stringify(probe));
  t.same(proxy.authorizations, [`Basic ${Buffer.from('zone@user:s3cret-pw').toString('base64')}`], 'Proxy-Authorization from the URL, decoded');

  proxy.mode = 'refuse';
  const refused = await probeControlPlane(`https://${ZONE_NAME}:${server.port}`, server.ca.certPem, { path: 'ca.pem', installed: false });
  t.notOk(JSON.stringify(refused).includes('s3cret-pw'), 'the password is never in the finding');
});

t.test('a proxy that refuses CONNECT is a clear failure naming the proxy and its answer, not a DNS problem', async (t) => {
  const server = await startEnrollServer(t, { names: { dnsNames: [ZONE_NAME], ipAddresses: [] } });
  const proxy = await startConnectProxy(t, {}, 'refuse');
  proxyEnv(t, { https_proxy: `http://user:pw-not-shown@${proxy.address}` });
  const url = `https://${ZONE_NAME}:${server.port}`;

  const probe = await probeControlPlane(url, server.ca.certPem, { path: 'ca.pem', installed: false });
  t.match(probe, { ok: false, finding: { code: 'NODE-CP-PROXY', cause: new RegExp(`proxy ${proxy.address} answered HTTP 403 Forbidden to CONNECT ${ZONE_NAME}:${server.port}`) } });
  t.notMatch(JSON.stringify(probe), /resolve|pw-not-shown/, 'neither DNS blamed nor the password shown');

  const failed = await enroll({ controlPlaneUrl: url, token: TOKEN, stateDir: t.testdir({}), caPem: server.ca.certPem, reenroll: false }).then(
    () => undefined,
    (err: unknown) => err as Error & { code: string },
  );
  t.match(failed, { code: 'PROXY', message: new RegExp(`proxy ${proxy.address} answered HTTP 403`) });
  t.match(failed?.message, /allow CONNECT to .* on the proxy, or, if .* no_proxy/);
  t.notMatch(failed?.message, /pw-not-shown|user:/);
  t.same(server.requests, [], 'nothing reached the control plane');
});

t.test('no_proxy and NO_PROXY let a listed host go direct past a refusing proxy, for enrollment and the control link alike', async (t) => {
  const server = await startEnrollServer(t);
  const refusing = await startConnectProxy(t, {}, 'refuse');
  await t.test('enrollment: the lowercase no_proxy wins over an uppercase NO_PROXY that would not match', async (t) => {
    proxyEnv(t, { https_proxy: refusing.url, no_proxy: 'example.test, 127.0.0.1', NO_PROXY: 'other.test' });
    const result = await enroll({ controlPlaneUrl: server.url, token: TOKEN, stateDir: t.testdir({}), caPem: server.ca.certPem, reenroll: false });
    t.equal(result.nodeName, 'edge-1');
  });
  await t.test('the control link: the uppercase NO_PROXY alone, with host:port', async (t) => {
    const gateway = await startFakeGateway(t);
    const state = await writeEnrolledState(t.testdir({}), gateway);
    proxyEnv(t, { https_proxy: refusing.url, NO_PROXY: `localhost,127.0.0.1:${gateway.port}` });
    const abort = new AbortController();
    // Stopped only once the node has its hello answered: the gateway seeing the call is not enough.
    let onEstablished!: () => void;
    const established = new Promise<'established'>((resolve) => (onEstablished = () => resolve('established')));
    const ended = runSession({ ...sessionOptions(state), signal: abort.signal, helloTimeoutMs: 15_000, onEstablished: () => onEstablished() });
    const first = await Promise.race([established, ended]);
    t.equal(first, 'established', 'the link came up directly');
    abort.abort();
    t.match(await ended, { reason: 'stopped', established: true });
  });
  t.same(refusing.connects, [], 'the proxy was never asked');
});

t.test('no_proxy matches as curl does: *, a host and its subdomains, host:port, CIDR', async (t) => {
  const env = (no_proxy: string): Record<string, string> => ({ https_proxy: 'http://proxy.example:3128', no_proxy });
  t.ok(bypassesProxy('anything.example', 443, env('*')));
  t.ok(bypassesProxy('cp.corp.example', 443, env('.corp.example')));
  t.ok(bypassesProxy('corp.example', 443, env('corp.example')));
  t.notOk(bypassesProxy('notcorp.example', 443, env('corp.example')), 'a suffix must start at a dot');
  t.ok(bypassesProxy('gw.example', 8443, env('gw.example:8443')));
  t.notOk(bypassesProxy('gw.example', 443, env('gw.example:8443')), 'host:port matches that port only');
  t.ok(bypassesProxy('10.1.2.3', 443, env('10.0.0.0/8')));
  t.ok(bypassesProxy('::1', 443, env('[::1]')));
  t.notOk(bypassesProxy('10.1.2.3', 443, env('10.1.2.4')));
  t.same(configuredProxy({ https_proxy: 'proxy.example:3128' }), { host: 'proxy.example', port: 3128, credentials: undefined, source: 'https_proxy', label: 'proxy.example:3128' }, 'a bare host:port is an http:// proxy');
  t.equal(configuredProxy({ https_proxy: 'http://a.example:1', HTTPS_PROXY: 'http://b.example:2' })?.host, 'a.example', 'lowercase wins');
  t.throws(() => configuredProxy({ https_proxy: 'https://u:secret@proxy.example' }), /only http:\/\/ proxies/);
  t.equal(configuredProxy({ https_proxy: 'http://al%69ce:50%off%21@proxy.example:3128' })?.credentials, 'alice:50%off!', 'a % that starts no escape is kept, as curl keeps it; escapes are decoded');
  t.equal(configuredProxy({ http_proxy: 'http://proxy.example:3128' }), undefined, 'http_proxy is not for TLS links');
});

t.test('doctor checks the gateway through the proxy, says so, and fails when the proxy refuses CONNECT', async (t) => {
  const gateway = await startFakeGateway(t, { dnsNames: ['gw.zone-b.invalid'] });
  const state = await writeEnrolledState(t.testdir({}), { target: `gw.zone-b.invalid:${gateway.port}`, ca: gateway.ca }, { serverName: 'gw.zone-b.invalid' });
  const proxy = await startConnectProxy(t, { 'gw.zone-b.invalid': '127.0.0.1' });
  proxyEnv(t, { https_proxy: proxy.url });

  const through = await runDoctor(state.dir);
  const gatewayChecks = through.filter((c) => c.label.startsWith('gateway '));
  t.match(gatewayChecks, [
    { ok: true, label: `gateway gw.zone-b.invalid:${gateway.port} reachable over TCP via proxy ${proxy.address} (https_proxy)` },
    { ok: true, label: new RegExp(`valid for "gw.zone-b.invalid" via proxy ${proxy.address}`) },
  ]);
  t.ok(proxy.connects.length >= 2 && proxy.connects.every((c) => c === `CONNECT gw.zone-b.invalid:${gateway.port}`), JSON.stringify(proxy.connects));

  proxy.mode = 'refuse';
  const refused = (await runDoctor(state.dir)).filter((c) => c.label.startsWith('gateway '));
  t.match(refused, [{ ok: false, label: /via proxy/, advice: new RegExp(`proxy ${proxy.address} answered HTTP 403 Forbidden to CONNECT gw.zone-b.invalid:${gateway.port}`) }]);
});

t.test('the control link goes through HTTPS_PROXY, and through a refusing proxy it ends GATEWAY_PROXY naming the proxy', async (t) => {
  const gateway = await startFakeGateway(t, { dnsNames: ['gw.zone-b.invalid'] });
  const state = await writeEnrolledState(t.testdir({}), { target: `gw.zone-b.invalid:${gateway.port}`, ca: gateway.ca }, { serverName: 'gw.zone-b.invalid' });
  const proxy = await startConnectProxy(t, { 'gw.zone-b.invalid': '127.0.0.1' });
  // Uppercase only: grpc-js on its own reads just the lowercase names.
  proxyEnv(t, { HTTPS_PROXY: proxy.url });
  const options = sessionOptions(state);

  const abort = new AbortController();
  // Stopped only once the node has its hello answered: the gateway seeing the call is not enough.
  let onEstablished!: () => void;
  const established = new Promise<void>((resolve) => (onEstablished = resolve));
  const ended = runSession({ ...options, signal: abort.signal, onEstablished: () => onEstablished() });
  await gateway.waitForSession(0);
  await established;
  t.ok(proxy.connects.length > 0 && proxy.connects.every((c) => c === `CONNECT gw.zone-b.invalid:${gateway.port}`), `the link went through the proxy: ${JSON.stringify(proxy.connects)}`);
  abort.abort();
  t.match(await ended, { reason: 'stopped', established: true });

  proxy.mode = 'refuse';
  const end = await runSession({ ...options, helloTimeoutMs: 15_000 });
  t.match(end, { reason: 'disconnected', code: 'GATEWAY_PROXY', established: false, message: new RegExp(`proxy ${proxy.address} answered HTTP 403 Forbidden to CONNECT gw.zone-b.invalid:${gateway.port}`) });
  t.notMatch(end.message, /undefined|Resolution note/);
  t.equal(gateway.sessions.length, 1, 'no session reached the gateway through the refusing proxy');
});
