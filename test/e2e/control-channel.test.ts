/**
 * The live control channel with real processes: credential rotation survives a lost reply, two
 * control-plane replicas share one gateway identity and cut a deleted node's stream, and a node
 * rides out a control-plane outage and reconnects by itself.
 */
import t from 'tap';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { testDatabase } from '../fixtures/postgres.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { callNode, callNodeDetailed, configureDemo, countLines, enrollNewNode, httpsMaterial, nodeView, startControlPlane, startNodeServe, tempDir, tryControlStream, freePort } from './stack.js';


interface Identity { nodeId: string; gateway: { target: string; serverName: string; caPem: string } }
interface CredentialFile { current: { id: string; secret: string } }

const readJson = <T>(file: string): T => JSON.parse(readFileSync(file, 'utf8')) as T;





t.test('a lost rotation reply: the node reconnects with its old credential inside the window, gets a fresh one, and the old one is refused after the window', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-rotate-');
  const https = await httpsMaterial(join(work, 'https'));
  const cp = await startControlPlane(t, {
    db, https, gatewayTlsDir: join(work, 'gw'),
    env: { ZENOVA_FAULT_DROP_ROTATION_REPLIES: '1', ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS: '1', ZENOVA_CREDENTIAL_HANDOVER_SECONDS: '4' },
  });
  const upstream = await startFakeUpstream(t);
  const { apiKey } = await configureDemo(cp, upstream.url);
  const stateDir = join(work, 'state');
  await enrollNewNode(t, cp, 'rotating', stateDir);
  const identity = readJson<Identity>(join(stateDir, 'identity.json'));
  const original = readJson<CredentialFile>(join(stateDir, 'credential.json')).current;

  const node = await startNodeServe(t, { stateDir });
  // The first rotation reply is dropped with the connection; the node must come back by itself.
  await waitFor(() => countLines(node.proc, /"msg":"control session ended"/) >= 1, { what: 'the stream cut with the dropped rotation', timeoutMs: 30_000 });
  await waitFor(() => readJson<CredentialFile>(join(stateDir, 'credential.json')).current.id !== original.id, { what: 'a fresh credential saved by the node', timeoutMs: 30_000 });
  await waitFor(async () => (await nodeView(cp, 'rotating')).status === 'online', { what: 'the node online after rotation', timeoutMs: 30_000 });
  await waitFor(async () => (await callNode(node.url, apiKey)) === 200, { what: 'the node to serve with its synced config', timeoutMs: 30_000 });
  t.pass('callers are served');

  const fresh = readJson<CredentialFile>(join(stateDir, 'credential.json')).current;
  const probe = { target: identity.gateway.target, serverName: identity.gateway.serverName, caPem: identity.gateway.caPem, nodeId: identity.nodeId };
  const refusal = await waitFor(async () => {
    const r = await tryControlStream({ ...probe, credential: original.secret });
    return r.accepted ? undefined : r;
  }, { what: 'the original credential to be refused after the handover window', timeoutMs: 30_000 });
  t.match(refusal.code, /CREDENTIAL_(SUPERSEDED|REVOKED|EXPIRED)/, 'the old credential is refused once the window has passed');
  t.not(fresh.id, original.id);
  t.equal(node.proc.child.exitCode, null, 'the node never exited');
});

t.test('two control planes on one database: one gateway identity, a node on either, and a delete on one cuts the stream on the other and the node refuses callers', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-replicas-');
  const https = await httpsMaterial(join(work, 'https'));
  const [cp1, cp2] = await Promise.all([
    startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw-1') }),
    startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw-2') }),
  ]);
  t.equal(readFileSync(join(work, 'gw-1', 'ca.crt'), 'utf8'), readFileSync(join(work, 'gw-2', 'ca.crt'), 'utf8'), 'both replicas serve one gateway CA');
  t.equal(readFileSync(join(work, 'gw-1', 'tls.crt'), 'utf8'), readFileSync(join(work, 'gw-2', 'tls.crt'), 'utf8'), 'and one server certificate');

  const upstream = await startFakeUpstream(t);
  const { apiKey } = await configureDemo(cp1, upstream.url);
  const stateDir = join(work, 'state');
  await enrollNewNode(t, cp1, 'replicated', stateDir);
  // Point the node at the second replica's gateway, as a load balancer might.
  const identityFile = join(stateDir, 'identity.json');
  const identity = readJson<Identity>(identityFile);
  identity.gateway.target = identity.gateway.target.replace(/:\d+$/, `:${cp2.gatewayPort}`);
  writeFileSync(identityFile, JSON.stringify(identity), { mode: 0o600 });

  const node = await startNodeServe(t, { stateDir });
  await node.proc.waitForLine(/"msg":"control session established"/, 30_000);
  await node.proc.waitForLine(/"msg":"config applied"/, 30_000);
  await waitFor(async () => (await nodeView(cp1, 'replicated')).status === 'online', { what: 'node online, seen from replica 1', timeoutMs: 30_000 });

  const del = await cp1.api('DELETE', '/api/v1/nodes/replicated');
  t.equal(del.status, 200);
  const ended = await node.proc.waitForLine(/"msg":"control session ended".*NODE_DELETED|NODE_DELETED.*"msg":"control session ended"/, 30_000);
  t.ok(ended, 'replica 2 ended the deleted node\'s stream');
  // A deleted node serves nobody (its cached keys are the deleted node's, its records undeliverable).
  const refused = await waitFor(async () => {
    const answer = await callNodeDetailed(node.url, apiKey);
    return answer.status === 503 ? answer : undefined;
  }, { what: 'the deleted node to refuse callers', timeoutMs: 10_000 });
  t.equal(refused.code, 'ZN_ERR_NODE_DELETED', 'the node then refuses callers as deleted');
});

t.test('with the control plane stopped the node keeps answering callers, and reconnects by itself when it is back', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-outage-');
  const https = await httpsMaterial(join(work, 'https'));
  const gatewayPort = await freePort();
  const cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw'), gatewayPort });
  const upstream = await startFakeUpstream(t);
  const { apiKey } = await configureDemo(cp, upstream.url);
  const stateDir = join(work, 'state');
  await enrollNewNode(t, cp, 'steadfast', stateDir);
  const node = await startNodeServe(t, { stateDir });
  await node.proc.waitForLine(/"msg":"config applied"/, 30_000);

  t.equal(await cp.proc.stop('SIGTERM'), 0, 'the control plane stops cleanly');
  await waitFor(() => countLines(node.proc, /"msg":"control session ended"/) >= 1, { what: 'the node to notice', timeoutMs: 15_000 });
  let served = 0;
  for (let i = 0; i < 20; i++) if ((await callNode(node.url, apiKey)) === 200) served++;
  t.equal(served, 20, 'every call during the outage was served');

  const before = countLines(node.proc, /"msg":"control session established"/);
  const cpAgain = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw'), gatewayPort });
  await waitFor(() => countLines(node.proc, /"msg":"control session established"/) > before, { what: 'the node to reconnect', timeoutMs: 30_000 });
  await waitFor(async () => (await nodeView(cpAgain, 'steadfast')).status === 'online', { what: 'online again', timeoutMs: 30_000 });
  t.pass('reconnected without help');
});
