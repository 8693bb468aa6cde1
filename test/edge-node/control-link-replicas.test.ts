// ZENOVA_NODE_REPLICAS > 1: several `zenova-node serve` processes on one state dir against the real
// node gateway. Exactly one of them runs the control link (the control plane keeps one session per
// node and replaces the older, so two links would knock each other off forever); when it is killed
// with -9, another takes the link over within a bounded time; the others take the config the holder
// wrote to the cache; records every replica spooled are backfilled.
import t from 'tap';
import type { Test } from 'tap';
import { BundleCache } from '../../edge-node/src/config/bundle-cache.js';
import { saveCredentials } from '../../edge-node/src/state/credential-store.js';
import { saveIdentity } from '../../edge-node/src/state/identity.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import { enrolledNode, gatewayIdentity, gatewaySettings, migratedPool, startTestGateway } from '../control-plane/gateway-harness.js';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import type { StartedProcess } from '../fixtures/processes.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();

async function serveReplica(t: Test, stateDir: string, name: string): Promise<{ proc: StartedProcess; url: string }> {
  const { command, args } = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({
    name,
    command,
    args: [...args, 'serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0'],
    env: {
      ZENOVA_NODE_REPLICAS: '3',
      ZENOVA_NODE_LINK_LOCK_INTERVAL_MS: '250',
      // Production back-off would hide flapping behind long waits; short back-off makes it loud.
      ZENOVA_NODE_RECONNECT_BASE_MS: '100',
      ZENOVA_NODE_RECONNECT_MAX_MS: '500',
    },
    readyLine: /"msg":"node-edge listening"/,
    timeoutMs: 60_000,
    t,
  });
  const ready = JSON.parse(await proc.waitForLine(/"msg":"node-edge listening"/)) as { url: string };
  return { proc, url: ready.url };
}

function count(proc: StartedProcess, msg: string): number {
  return parseJsonLines(proc.output()).filter((l) => l.msg === msg).length;
}

t.test('three replicas on one state dir: one stable session, takeover after kill -9, config followed', async (t) => {
  const settings = gatewaySettings(db.url);
  const gateway = await startTestGateway(t, { pool, settings, identity });
  const node = await enrolledNode(pool, settings);
  const stateDir = t.testdir({});
  const store = await openStateStore(stateDir, { create: true });
  const signer = createSigner();
  await saveCredentials(store, { current: { id: node.credentialId, secret: node.credential, expiresAt: new Date(Date.now() + 86_400_000).toISOString() } });
  await saveIdentity(store, {
    nodeId: node.id,
    nodeName: node.name,
    controlPlaneUrl: 'https://cp.example:8080',
    gateway: { target: `127.0.0.1:${gateway.server.port}`, serverName: 'localhost', caPem: identity.caPem },
    configSigningPublicKeyPem: signer.publicKeyPem,
    enrolledAt: new Date().toISOString(),
  });

  const replicas = [await serveReplica(t, stateDir, 'replica-0'), await serveReplica(t, stateDir, 'replica-1'), await serveReplica(t, stateDir, 'replica-2')];
  const established = (): number[] => replicas.map((r) => count(r.proc, 'control session established'));
  await waitFor(() => established().reduce((a, b) => a + b, 0) >= 1, { what: 'a control session', timeoutMs: 30_000 });
  // Long enough for the reviewer's flapping (10 sessions in 20 s at production back-off) to show many times over.
  await new Promise((resolve) => setTimeout(resolve, 6_000));
  const sessions = established();
  t.equal(sessions.reduce((a, b) => a + b, 0), 1, `exactly one session in 6 s (per replica: ${sessions.join(', ')})`);
  const holderIndex = sessions.findIndex((n) => n === 1);
  const holder = replicas[holderIndex]!;
  t.equal(count(holder.proc, 'this process holds the control link'), 1);
  for (const r of replicas) t.equal(count(r.proc, 'control session ended'), 0, 'no session was ever ended (no SESSION_REPLACED)');

  // A bundle the holder writes to the cache (as its applier does on a push) reaches the followers.
  const followers = replicas.filter((_, i) => i !== holderIndex);
  const push = signedPush(testBundle({ nodeId: node.id, version: 7, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [bundleKey('k', newCallerKey().sha256)] }), signer);
  await new BundleCache(stateDir).store({ version: 7, bundle: push.bundle.toString('utf8'), signature: push.signature.toString('base64'), appliedAt: new Date().toISOString() }, undefined);
  for (const f of followers) {
    await f.proc.waitForLine(/config applied from the cache/, 30_000);
    const ready = (await (await fetch(`${f.url}/readyz`)).json()) as { configVersion: number; controlPlane: { connected: boolean } };
    t.equal(ready.configVersion, 7, 'a follower serves the version the holder cached');
    t.equal(ready.controlPlane.connected, true, "a follower's /readyz shows the holder's link");
  }

  // kill -9 the holder: another replica takes the link over, and only one does, because the holder's
  // pid is gone (why: 'holder-dead' below; docs/node-api.md). No wall-clock bound on when, which a
  // loaded CI host breaks.
  await holder.proc.kill9();
  await waitFor(() => followers.some((f) => count(f.proc, 'control session established') === 1), { what: 'a takeover session', timeoutMs: 30_000 });
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  const after = followers.map((f) => count(f.proc, 'control session established'));
  t.same(after.slice().sort(), [0, 1], `exactly one follower took over, with one session (${after.join(', ')})`);
  const newHolder = followers[after.indexOf(1)]!;
  t.match(parseJsonLines(newHolder.proc.output()).find((l) => l.msg === 'this process holds the control link'), { why: 'holder-dead' }, "taken over because the holder's pid is gone");
  for (const f of followers) t.equal(count(f.proc, 'control session ended'), 0);

  // A clean stop of the holder hands the link to the last replica.
  await newHolder.proc.stop();
  const last = followers.find((f) => f !== newHolder)!;
  await waitFor(() => count(last.proc, 'control session established') === 1, { what: 'the last replica takes the link', timeoutMs: 15_000 });
  t.match(parseJsonLines(last.proc.output()).find((l) => l.msg === 'this process holds the control link'), { why: 'free' });
});
