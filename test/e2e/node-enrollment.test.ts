/**
 * Enrollment end to end, with real processes, real PostgreSQL and real TLS: create node → install
 * command → `zenova-node enroll` → `serve` → online with stage first-heartbeat; token reuse, expiry,
 * wrong CA, wrong host name and bad credentials are each refused clearly, and nothing crashes.
 */
import t from 'tap';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { testDatabase } from '../fixtures/postgres.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { configureDemo, createNode, httpsMaterial, nodeView, runEnroll, startControlPlane, startNodeServe, tempDir, tokenOf, tryControlStream, type ControlPlane } from './stack.js';





let cp: ControlPlane;
let apiKey: string;
let dbUrl: string;
let work: string;

t.before(async () => {
  const db = await testDatabase(t);
  dbUrl = db.url;
  work = tempDir(t, 'zn-e2e-enroll-');
  // The console certificate covers 127.0.0.1 only, so https://localhost:… is a host-name mismatch.
  const https = await httpsMaterial(join(work, 'https'), { ipAddresses: ['127.0.0.1'] });
  cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gateway-tls') });
  const upstream = await startFakeUpstream(t);
  apiKey = (await configureDemo(cp, upstream.url)).apiKey;
});

t.test('a created node enrolls with its install command, serves, and goes online past stage first-heartbeat', async (t) => {
  const created = await createNode(cp, 'branch-sh');
  t.match(created.install.command, /^printf '%s\\n' \S+ \| sudo \.\/zenova install node --package zenova-node\.zpkg --control-plane https:\/\/\S+ --token-file - --ca-file \S+$/);
  t.equal((await nodeView(cp, 'branch-sh')).status, 'pending');

  const stateDir = join(work, 'branch-sh-state');
  const enrolled = await runEnroll(t, { url: cp.url, token: tokenOf(created.install.command), stateDir, caFile: cp.https.caFile });
  t.equal(enrolled.code, 0, enrolled.output);
  t.notMatch(enrolled.output, tokenOf(created.install.command), 'the token is never printed');
  t.equal((await nodeView(cp, 'branch-sh')).onboardingStage, 'registered');

  const node = await startNodeServe(t, { stateDir });
  await node.proc.waitForLine(/"msg":"control session established"/, 30_000);
  await node.proc.waitForLine(/"msg":"config applied"/, 30_000);
  const view = await waitFor(async () => {
    const v = await nodeView(cp, 'branch-sh');
    // first-heartbeat, then config-synced as soon as the first bundle is acknowledged
    return v.status === 'online' && (v.onboardingStage === 'first-heartbeat' || v.onboardingStage === 'config-synced') ? v : undefined;
  }, { what: 'branch-sh online past first-heartbeat', timeoutMs: 30_000 });
  t.ok(view.lastHeartbeatAt, 'lastHeartbeatAt is set');
  t.ok(view.version, 'the node reported its version');

  const res = await fetch(`${node.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }),
  });
  t.equal(res.status, 200, 'the enrolled node answers callers');
  t.ok(res.headers.get('x-request-id'));

  await t.test('the same token used again fails with the "already used" code', async (t) => {
    const again = await runEnroll(t, { url: cp.url, token: tokenOf(created.install.command), stateDir: join(work, 'reuse-state'), caFile: cp.https.caFile });
    t.not(again.code, 0);
    t.match(again.output, /already used/i);
    t.match(again.output, /ZN_ERR_CP_TOKEN_USED|install-command/);
  });
});

t.test('an expired install token fails with "expired"', async (t) => {
  const created = await createNode(cp, 'branch-bj');
  const client = new pg.Client({ connectionString: dbUrl });
  await client.connect();
  await client.query("update install_tokens set expires_at = now() - interval '1 minute' where used_at is null");
  await client.end();
  const r = await runEnroll(t, { url: cp.url, token: tokenOf(created.install.command), stateDir: join(work, 'expired-state'), caFile: cp.https.caFile });
  t.not(r.code, 0);
  t.match(r.output, /expired/i);
});

t.test('enrolling with the wrong CA is refused as untrusted, and the token is not consumed', async (t) => {
  const created = await createNode(cp, 'branch-gz');
  const other = await httpsMaterial(join(work, 'other-ca'));
  const r = await runEnroll(t, { url: cp.url, token: tokenOf(created.install.command), stateDir: join(work, 'wrongca-state'), caFile: other.caFile });
  t.not(r.code, 0);
  t.match(r.output, /not trusted|certificate/i);
  const ok = await runEnroll(t, { url: cp.url, token: tokenOf(created.install.command), stateDir: join(work, 'wrongca-state'), caFile: cp.https.caFile });
  t.equal(ok.code, 0, `the token still works with the right CA: ${ok.output}`);
});

t.test('enrolling through a host name the certificate does not cover is refused', async (t) => {
  const created = await createNode(cp, 'branch-cd');
  const wrongHost = cp.url.replace('127.0.0.1', 'localhost');
  const r = await runEnroll(t, { url: wrongHost, token: tokenOf(created.install.command), stateDir: join(work, 'wronghost-state'), caFile: cp.https.caFile });
  t.not(r.code, 0);
  t.match(r.output, /host ?name|does not match|mismatch/i);
});

t.test('a node with a tampered credential is refused by the gateway, keeps serving callers, and nothing crashes', async (t) => {
  const created = await createNode(cp, 'branch-xa');
  const stateDir = join(work, 'tampered-state');
  t.equal((await runEnroll(t, { url: cp.url, token: tokenOf(created.install.command), stateDir, caFile: cp.https.caFile })).code, 0);
  // A first run fetches and caches the config; then the credential is damaged.
  const first = await startNodeServe(t, { stateDir });
  await first.proc.waitForLine(/"msg":"config applied"/, 30_000);
  await first.proc.stop();
  const credFile = join(stateDir, 'credential.json');
  const cred = JSON.parse(readFileSync(credFile, 'utf8')) as { current: { secret: string } };
  cred.current.secret = cred.current.secret.replace(/.{6}$/, 'AAAAAA');
  writeFileSync(credFile, JSON.stringify(cred), { mode: 0o600 });
  const node = await startNodeServe(t, { stateDir });
  await node.proc.waitForLine(/CREDENTIAL_INVALID/, 30_000);
  const res = await fetch(`${node.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'still there?' }] }),
  });
  t.equal(res.status, 200, 'callers are still served from the cached config');
  t.equal(node.proc.child.exitCode, null, 'the node is still running');
  t.equal(cp.proc.child.exitCode, null, 'the control plane is still running');
  await waitFor(async () => (await nodeView(cp, 'branch-xa')).status === 'offline', { what: 'the refused node to be shown offline', timeoutMs: 20_000 });
  t.pass('the refused node goes offline in the console while it keeps serving');
});

t.test('the control channel refuses a wrong gateway CA, a wrong gateway host name and an incompatible protocol, each with its own code', async (t) => {
  const created = await createNode(cp, 'branch-wh');
  const stateDir = join(work, 'gateway-checks-state');
  t.equal((await runEnroll(t, { url: cp.url, token: tokenOf(created.install.command), stateDir, caFile: cp.https.caFile })).code, 0);
  const identityFile = join(stateDir, 'identity.json');
  const original = readFileSync(identityFile, 'utf8');
  const identity = JSON.parse(original) as { nodeId: string; gateway: { target: string; serverName: string; caPem: string } };
  const credential = (JSON.parse(readFileSync(join(stateDir, 'credential.json'), 'utf8')) as { current: { secret: string } }).current.secret;

  await t.test('a gateway certificate from another CA is not trusted', async (t) => {
    const other = await httpsMaterial(join(work, 'gw-other-ca'));
    writeFileSync(identityFile, JSON.stringify({ ...identity, gateway: { ...identity.gateway, caPem: other.caPem } }), { mode: 0o600 });
    const node = await startNodeServe(t, { stateDir });
    await node.proc.waitForLine(/GATEWAY_TLS_UNTRUSTED/, 30_000);
    t.pass('refused as untrusted');
    await node.proc.stop();
  });

  await t.test('a gateway host name the certificate does not cover is refused', async (t) => {
    writeFileSync(identityFile, JSON.stringify({ ...identity, gateway: { ...identity.gateway, serverName: 'gateway.wrong.example' } }), { mode: 0o600 });
    const node = await startNodeServe(t, { stateDir });
    await node.proc.waitForLine(/GATEWAY_TLS_NAME_MISMATCH/, 30_000);
    t.pass('refused for the name');
    await node.proc.stop();
  });

  await t.test('a node speaking another protocol version is told so', async (t) => {
    writeFileSync(identityFile, original, { mode: 0o600 });
    const r = await tryControlStream({ target: identity.gateway.target, serverName: identity.gateway.serverName, caPem: identity.gateway.caPem, nodeId: identity.nodeId, credential, protocolVersion: 999 });
    t.same(r, { accepted: false, code: 'PROTOCOL_INCOMPATIBLE' });
    const ok = await tryControlStream({ target: identity.gateway.target, serverName: identity.gateway.serverName, caPem: identity.gateway.caPem, nodeId: identity.nodeId, credential });
    t.same(ok, { accepted: true }, 'the same credential with the right protocol is welcomed');
  });
  t.equal(cp.proc.child.exitCode, null, 'the control plane survived all of it');
});
