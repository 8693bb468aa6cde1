// A control plane with an external gateway certificate and no ZENOVA_GATEWAY_TRUST_BUNDLE hands
// out no gateway CA (caPem ''): the node saves an identity without a pinned CA and verifies the
// gateway against its system trust store (Node's default CA store), still checking the name.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { gatewayChannelCredentials } from '../../edge-node/src/control/gateway-channel.js';
import { enrollResponseSchema } from '../../edge-node/src/enroll/enroll-api.js';
import { gatewayTrust, loadIdentity, saveIdentity } from '../../edge-node/src/state/identity.js';
import { runNodeCli as run } from './cli-capture.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import { createTestCa } from '../fixtures/tls.js';
import type { TestCa } from '../fixtures/tls.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import type { EnrolledState, FakeGateway } from './control-fixtures.js';
import { CONFIG_SIGNING_PUBLIC_KEY_PEM, startEnrollServer } from './enroll-fixtures.js';

const TOKEN = 'zn_it_U3lzdGVtVHJ1c3RUb2tlbk5ldmVyUHJpbnRlZDAxMjM0NTY3';

function answerWithGatewayCa(caPem: string | undefined, url: string): Record<string, unknown> {
  const id = '7d0c5b1e-94a4-4a5e-8f0b-0d3c1f8e2a11';
  return {
    nodeId: '0f6e0a53-3c1e-4a55-9a7c-5b7f1c2d3e4f',
    nodeName: 'edge-1',
    credential: { id, secret: `${id}.${'a'.repeat(43)}`, expiresAt: new Date(Date.now() + 86_400_000).toISOString() },
    gateway: { target: '127.0.0.1:8443', serverName: 'localhost', ...(caPem !== undefined ? { caPem } : {}) },
    configSigningPublicKeyPem: CONFIG_SIGNING_PUBLIC_KEY_PEM,
    controlPlaneUrl: url,
  };
}

/** An enrolled state dir for `gateway` whose identity pins no CA, as enrolling against '' leaves it. */
async function systemTrustState(dir: string, gateway: FakeGateway, serverName = 'localhost'): Promise<EnrolledState> {
  const state = await writeEnrolledState(dir, gateway, { serverName });
  const { caPem: _pinned, ...unpinned } = state.identity.gateway;
  const identity = { ...state.identity, gateway: unpinned };
  await saveIdentity(state.store, identity);
  return { ...state, identity };
}

async function caFileOf(dir: string, ca: TestCa): Promise<string> {
  const file = path.join(dir, 'extra-roots.pem');
  await writeFile(file, ca.certPem);
  return file;
}

/** The node's gateway client in a child process with `env`: did the gateway accept the hello? */
async function connectInChild(t: Test, stateDir: string, env: NodeJS.ProcessEnv): Promise<{ accepted: boolean; kind?: string; message?: string }> {
  const { command, args } = tsEntry('test/edge-node/gateway-trust-child.ts');
  const proc = await startProcess({ name: 'gateway client', command, args: [...args, stateDir], env, t });
  const exit = await proc.exited;
  const line = proc.output().split('\n').find((l) => l.startsWith('{"accepted"'));
  if (exit.code !== 0 || line === undefined) throw new Error(`the child failed (exit ${exit.code}): ${proc.output()}`);
  return JSON.parse(line) as { accepted: boolean; kind?: string; message?: string };
}

t.test('the gateway trust is the pinned CA when the identity has one and the system trust store when it has none', async (t) => {
  const ca = await createTestCa();
  t.same(gatewayTrust({ target: 'gw.example.com:8443', serverName: 'gw.example.com', caPem: ca.certPem }), { kind: 'pinned-ca', caPem: ca.certPem });
  t.same(gatewayTrust({ target: 'gw.example.com:8443', serverName: 'gw.example.com' }), { kind: 'system' });
  t.ok(gatewayChannelCredentials({ target: 'gw.example.com:8443', serverName: 'gw.example.com' })._isSecure(), 'system trust is still TLS');
});

t.test('an enrollment answer with an empty gateway CA is accepted; one with an unparseable or missing CA is not', async (t) => {
  const url = 'https://cp.example.com';
  t.ok(enrollResponseSchema.safeParse(answerWithGatewayCa('', url)).success, "'' means: no pinned CA");
  t.ok(enrollResponseSchema.safeParse(answerWithGatewayCa((await createTestCa()).certPem, url)).success, 'a PEM CA is pinned');
  t.notOk(enrollResponseSchema.safeParse(answerWithGatewayCa('junk', url)).success, 'junk is still refused');
  t.notOk(enrollResponseSchema.safeParse(answerWithGatewayCa(undefined, url)).success, "the field stays required: '' is the one way to say none");
});

t.test('enrolling against an answer without a gateway CA saves an identity that uses the system trust store, and status says so', async (t) => {
  let url = '';
  const server = await startEnrollServer(t, { enroll: () => ({ status: 200, body: answerWithGatewayCa('', url) }) });
  url = server.url;
  const dir = t.testdir({});
  const stateDir = path.join(dir, 'state');
  const caFile = path.join(dir, 'cp-ca.pem');
  await writeFile(caFile, server.ca.certPem);
  const result = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', caFile]);
  t.equal(result.code, 0, result.stderr);

  const identity = await loadIdentity(await openStateStore(stateDir, { create: false }));
  t.same(identity?.gateway, { target: '127.0.0.1:8443', serverName: 'localhost' }, 'no caPem saved: nothing pinned');
  t.same(gatewayTrust(identity!.gateway), { kind: 'system' });

  const text = await run(['status', '--state-dir', stateDir]);
  t.match(text.stdout, /gateway trust:\s+system trust store/);
  const json = JSON.parse((await run(['status', '--state-dir', stateDir, '--json'])).stdout) as { gateway: { trust: string } };
  t.equal(json.gateway.trust, 'system');
});

t.test('status of a node enrolled with a gateway CA says the CA is pinned', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  t.match((await run(['status', '--state-dir', state.dir])).stdout, /gateway trust:\s+pinned CA/);
});

t.test('without a pinned CA the node connects to a gateway whose CA is among its default roots (NODE_EXTRA_CA_CERTS) and refuses it otherwise', async (t) => {
  const ca = await createTestCa();
  const gateway = await startFakeGateway(t, { ca });
  const dir = t.testdir({});
  const state = await systemTrustState(path.join(dir, 'state'), gateway);
  const extraRoots = await caFileOf(dir, ca);

  const trusted = await connectInChild(t, state.dir, { NODE_EXTRA_CA_CERTS: extraRoots });
  t.same(trusted, { accepted: true }, 'the gateway CA is a default root of the child: verified handshake, hello accepted');
  t.equal(gateway.sessions.length, 1);

  const untrusted = await connectInChild(t, state.dir, { NODE_EXTRA_CA_CERTS: undefined });
  t.match(untrusted, { accepted: false, kind: 'untrusted' }, 'a CA in no trust store is refused: verification is never off');

  const otherName = await systemTrustState(path.join(dir, 'other-name'), gateway, 'gateway.other.example');
  const mismatch = await connectInChild(t, otherName.dir, { NODE_EXTRA_CA_CERTS: extraRoots });
  t.match(mismatch, { accepted: false, kind: 'name-mismatch' }, 'a trusted CA does not excuse a certificate without the saved name');
  t.equal(gateway.sessions.length, 1, 'the gateway never saw the refused calls');
});

t.test('doctor names the system trust store and passes when the gateway CA is a default root, fails with advice when not', async (t) => {
  const ca = await createTestCa();
  const gateway = await startFakeGateway(t, { ca });
  const dir = t.testdir({});
  const state = await systemTrustState(path.join(dir, 'state'), gateway);
  const extraRoots = await caFileOf(dir, ca);
  const { command, args } = tsEntry('edge-node/src/main.ts');
  const doctor = async (env: NodeJS.ProcessEnv): Promise<{ code: number | null; output: string }> => {
    const proc = await startProcess({ name: 'zenova-node doctor', command, args: [...args, 'doctor', '--state-dir', state.dir], env, t });
    return { code: (await proc.exited).code, output: proc.output() };
  };

  const ok = await doctor({ NODE_EXTRA_CA_CERTS: extraRoots });
  t.match(ok.output, /ok\s+gateway TLS certificate trusted \(system trust store\) and valid for "localhost"/);
  const failed = await doctor({ NODE_EXTRA_CA_CERTS: undefined });
  t.match(failed.output, /FAIL\s+gateway TLS certificate trusted \(system trust store\)/);
  t.match(failed.output, /not trusted \(checked against this host's system trust store\).*ZENOVA_GATEWAY_TRUST_BUNDLE/s);
  t.not(failed.code, 0);
});
