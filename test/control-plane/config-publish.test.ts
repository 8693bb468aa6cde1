// Config reaches nodes over their control streams: a raw grpc-js client over real TLS plays the
// node against real gateways on real PostgreSQL. A node behind gets the latest signed bundle after
// hello, every committed change is pushed (coalesced: one push in flight per node), acks are
// recorded as the node's applied version or its refusal, and no log line carries a provider secret.
import * as grpc from '@grpc/grpc-js';
import type pg from 'pg';
import t from 'tap';
import { configSigningKeyId } from '../../control-plane/src/config/bundle-builder.js';
import { latestConfigVersion } from '../../control-plane/src/config/config-changes.js';
import { findNodeById } from '../../control-plane/src/nodes/node-repository.js';
import { toNodeView, type NodeView } from '../../control-plane/src/nodes/node-view.js';
import { configContentSha256, verifyConfigBundle, type ConfigBundle, type ConfigPush } from '../../proto/src/index.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { changeConfig, seedConfig } from './bundle-seed.js';
import {
  connectNode,
  enrolledNode,
  gatewayIdentity,
  gatewaySettings,
  harnessSecretBox,
  helloFor,
  liveSession,
  migratedPool,
  refusalOf,
  startTestGateway,
  testPool,
  type NodeConnection,
  type TestGateway,
} from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const gateway = await startTestGateway(t, { pool, settings, identity });
/** Every gateway of this file, for the last test's look at their logs. */
const gateways: TestGateway[] = [gateway];
const port = gateway.server.port;
const seeded = await seedConfig(pool, harnessSecretBox);
const publicKeyPem = gateway.signingKey.publicKeyPem;

async function viewOf(nodeId: string, db: pg.Pool = pool): Promise<NodeView> {
  const row = await findNodeById(db, nodeId);
  if (row === undefined) throw new Error(`no node ${nodeId}`);
  return toNodeView(row, { offlineAfterMs: settings.nodes.offlineAfterMs });
}

/** Verifies a push as the node must: signature with the pinned key, canonical form, schema. */
function opened(push: ConfigPush): ConfigBundle {
  const check = verifyConfigBundle(push.bundle, push.signature, publicKeyPem);
  if (!check.ok) throw new Error(`the push does not verify: ${check.code}: ${check.message}`);
  return check.bundle;
}

/**
 * Acks every push from index `from` on as it arrives, like a healthy node, until `done()` holds;
 * returns the versions it acked. `done` is only asked once every push seen so far is acked.
 */
function ackEveryPush(conn: NodeConnection, from: number, done: () => boolean): Promise<bigint[]> {
  const versions: bigint[] = [];
  return waitFor(async () => {
    for (;;) {
      const push = conn.configPushes[from + versions.length];
      if (push === undefined) break;
      versions.push(push.version);
      conn.ackConfig(push.version);
    }
    return done() ? versions : undefined;
  }, { timeoutMs: 30_000, intervalMs: 5, what: 'the node to end on the latest version' });
}

const heartbeat = (): Parameters<NodeConnection['send']>[0] => ({
  heartbeat: { sentAt: BigInt(Date.now()), requests5m: 0n, errors5m: 0n, spoolBytes: 0n, backfillBacklog: 0n, appliedConfigVersion: 0n, ready: true },
});

function logLines(g: TestGateway, msg: string): Array<Record<string, unknown>> {
  return g.log.lines().filter((l) => l.msg === msg);
}

t.test('a node that says hello with nothing applied is pushed the latest bundle, signed and holding what the database holds', async (t) => {
  const node = await enrolledNode(pool, settings);
  const latest = await latestConfigVersion(pool);
  t.equal((await viewOf(node.id)).configVersionsBehind, latest, 'before: behind by every version');

  const { conn } = await liveSession(t, port, identity.caPem, node);
  const push = await conn.nextConfigPush('the push after hello');
  t.equal(push.version, BigInt(latest));
  t.equal(push.keyId, configSigningKeyId(publicKeyPem), 'keyId names the signing key');
  const bundle = opened(push);
  t.equal(bundle.version, latest);
  t.equal(bundle.nodeId, node.id);
  t.equal(bundle.nodeName, node.name);
  t.ok(bundle.apiKeys.some((k) => k.sha256 === seeded.keySha256 && k.status === 'active'), 'the active key, by hash');
  t.ok(bundle.apiKeys.some((k) => k.id === seeded.revokedKeyId && k.status === 'revoked'), 'the revoked key');
  t.equal(bundle.upstreams.find((u) => u.name === seeded.upstreamName)?.apiKey, seeded.upstreamSecret, 'the upstream secret, for this node');
  t.ok(bundle.routes.some((r) => r.alias === seeded.routeAlias));

  conn.ackConfig(push.version);
  const view = await waitFor(async () => {
    const v = await viewOf(node.id);
    return v.appliedConfigVersion === latest ? v : undefined;
  }, { what: 'the applied version to be recorded' });
  t.equal(view.configVersionsBehind, 0);
  t.equal(view.onboardingStage, 'config-synced');
  t.equal(view.configError, null);
  const applied = logLines(gateway, 'node applied config').find((l) => l.nodeId === node.id);
  t.equal(applied?.version, latest, 'the gateway logs the applied version');

  conn.send(heartbeat());
  const later = await waitFor(async () => {
    const v = await viewOf(node.id);
    return v.lastHeartbeatAt !== null ? v : undefined;
  }, { what: 'the first heartbeat to be recorded' });
  t.equal(later.onboardingStage, 'config-synced', 'a heartbeat after the ack does not move the stage back');
});

t.test('a committed change is pushed to a live node, and its ack makes it current', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  const first = await conn.nextConfigPush('the push after hello');
  conn.ackConfig(first.version);

  const changedAt = Date.now();
  const version = await changeConfig(pool, `price-${node.name}`);
  const push = await conn.nextConfigPush('the push of the change');
  t.comment(`pushed ${Date.now() - changedAt} ms after the commit`);
  t.equal(push.version, BigInt(version));
  t.ok(opened(push).prices.some((p) => p.model === `price-${node.name}`), 'the bundle holds the change');
  conn.ackConfig(push.version);
  const view = await waitFor(async () => {
    const v = await viewOf(node.id);
    return v.appliedConfigVersion === version ? v : undefined;
  }, { what: 'the change to be recorded as applied' });
  t.equal(view.configVersionsBehind, 0);
});

t.test('a node already on the latest version is not pushed until something changes', async (t) => {
  const node = await enrolledNode(pool, settings);
  const latest = await latestConfigVersion(pool);
  const conn = connectNode(t, port, identity.caPem, { nodeId: node.id, credential: node.credential });
  conn.send(helloFor(node, { appliedConfigVersion: BigInt(latest) }));
  t.ok((await conn.next('HelloAck')).helloAck);
  const version = await changeConfig(pool);
  const push = await conn.nextConfigPush('the push of the change');
  t.equal(push.version, BigInt(version), 'the first push is the change: nothing went out at hello');
});

t.test('a node on the newest version with this control plane\'s content, built by another gateway, is neither pushed nor moves the versions', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn: first } = await liveSession(t, port, identity.caPem, node);
  const served = await first.nextConfigPush('the push after hello');
  first.ackConfig(served.version);
  first.end();
  // Another replica builds the bundle afresh (another issuedAt): the content is what counts.
  const other = await startTestGateway(t, { pool: testPool(t, db.url), settings, identity });
  gateways.push(other);
  const conn = connectNode(t, other.server.port, identity.caPem, { nodeId: node.id, credential: node.credential });
  conn.send(helloFor(node, { appliedConfigVersion: served.version, highestAppliedConfigVersion: served.version, appliedConfigContentSha256: configContentSha256(served.bundle) }));
  t.ok((await conn.next('HelloAck')).helloAck);
  const version = await changeConfig(pool);
  t.equal(version, Number(served.version) + 1, 'the versions did not move on');
  const push = await conn.nextConfigPush('the push of the change');
  t.equal(push.version, BigInt(version), 'the first push is the change: nothing went out at hello');
});

t.test('a node on the newest version with other content (a restored database) moves the versions on and is pushed the current config', async (t) => {
  const node = await enrolledNode(pool, settings);
  const latest = await latestConfigVersion(pool);
  const conn = connectNode(t, port, identity.caPem, { nodeId: node.id, credential: node.credential });
  // Before the restore, this number was another config.
  conn.send(helloFor(node, { appliedConfigVersion: BigInt(latest), highestAppliedConfigVersion: BigInt(latest), appliedConfigContentSha256: Buffer.alloc(32, 7) }));
  t.ok((await conn.next('HelloAck')).helloAck);
  const push = await conn.nextConfigPush('the push after hello');
  t.equal(push.version, BigInt(latest + 1), 'a version past the node\'s');
  t.equal(await latestConfigVersion(pool), latest + 1, 'recorded');
  t.equal(opened(push).version, latest + 1);
  conn.ackConfig(push.version);
  await waitFor(async () => ((await viewOf(node.id)).appliedConfigVersion === latest + 1 ? true : undefined), { what: 'the applied version to be recorded' });
  t.ok(logLines(gateway, 'the node serves another config under this control plane\'s newest version (database restored from a backup?): config versions continue past it so every node takes the current config').some((l) => l.nodeId === node.id), 'logged');
});

t.test('a node that serves nothing but had applied a version past the newest (its mark) moves the versions past the mark', async (t) => {
  const node = await enrolledNode(pool, settings);
  const latest = await latestConfigVersion(pool);
  const conn = connectNode(t, port, identity.caPem, { nodeId: node.id, credential: node.credential });
  // Its cache was rolled back: it serves no config, and refuses versions below its mark.
  conn.send(helloFor(node, { appliedConfigVersion: 0n, highestAppliedConfigVersion: BigInt(latest + 40) }));
  t.ok((await conn.next('HelloAck')).helloAck);
  const push = await conn.nextConfigPush('the push after hello');
  t.equal(push.version, BigInt(latest + 41), 'a version past the mark, which the node takes');
});

t.test('50 changes in a burst: the node, acking each push, ends on the latest version with fewer pushes than changes', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  const first = await conn.nextConfigPush('the push after hello');
  conn.ackConfig(first.version);
  await waitFor(async () => (await viewOf(node.id)).configVersionsBehind === 0, { what: 'the node to be current' });

  // The versions of the burst's changes, in commit order: change i sets the price to i + 1.
  const changes: number[] = [];
  let burstCommitted = false;
  // "Done" only once the whole burst is committed: a push of a mid-burst version that happens to
  // be the newest so far must not stop the acking (the node would then hold a push unacknowledged
  // and, rightly, be pushed nothing newer).
  const latestPushed = (): boolean => burstCommitted && conn.configPushes.at(-1)?.version === BigInt(changes.at(-1)!);
  const from = conn.configPushes.length;
  const acking = ackEveryPush(conn, from, latestPushed);
  for (let i = 0; i < 50; i += 1) {
    changes.push(await changeConfig(pool, `burst-${node.name}`));
    // Mid-burst, let the node catch up with the newest version so far: the moment a careless
    // "done" would take for the end (as it once did under load, by chance).
    if (i === 9) await waitFor(() => conn.configPushes.at(-1)?.version === BigInt(changes.at(-1)!), { what: 'the node to catch up mid-burst' });
  }
  burstCommitted = true;
  const latest = changes.at(-1)!;
  const versions = await acking;
  t.comment(`${versions.length} pushes for 50 changes`);
  t.equal(versions.at(-1), BigInt(latest), 'the last push is the latest version');
  t.ok(versions.length <= 50, 'no more pushes than changes');
  t.ok(versions.every((v, i) => i === 0 || v > versions[i - 1]!), 'versions only go up');
  // The contract: a bundle labelled N holds exactly the changes up to N, never an older snapshot.
  const priceIn = (push: ConfigPush): number | undefined => opened(push).prices.find((p) => p.model === `burst-${node.name}`)?.inputMicrosPerToken;
  const pushed = conn.configPushes.slice(from, from + versions.length);
  t.same(
    pushed.map((push) => priceIn(push)),
    pushed.map((push) => changes.filter((v) => v <= Number(push.version)).length || undefined),
    'every pushed bundle holds exactly the changes up to its version',
  );
  t.equal(priceIn(conn.configPushes.at(-1)!), 50, 'the last bundle holds all 50 changes');
  const view = await waitFor(async () => {
    const v = await viewOf(node.id);
    return v.appliedConfigVersion === latest ? v : undefined;
  }, { what: 'the latest version to be recorded' });
  t.equal(view.configVersionsBehind, 0);
});

t.test('one push in flight per node: changes while it is unacknowledged wait, and the ack brings only the newest', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  const first = await conn.nextConfigPush('the push after hello');
  let latest = 0;
  for (let i = 0; i < 5; i += 1) latest = await changeConfig(pool);
  // The gateway has heard the last change, and has handled a heartbeat since: any push it would
  // make without the ack would be on the stream before the heartbeat's row is written.
  await waitFor(() => logLines(gateway, 'config change heard').some((l) => l.version === latest), { what: 'the gateway to hear the changes' });
  conn.send(heartbeat());
  await waitFor(async () => (await viewOf(node.id)).lastHeartbeatAt !== null, { what: 'the heartbeat to be recorded' });
  t.equal(conn.configPushes.length, 1, 'still only the first push');

  conn.ackConfig(first.version);
  const next = await conn.nextConfigPush('the push after the ack');
  t.equal(next.version, BigInt(latest), 'the newest version, skipping the ones in between');
});

t.test('a refused push is recorded with its code, message and version, logged, and a later version still goes out', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  const push = await conn.nextConfigPush('the push after hello');
  conn.ackConfig(push.version, { code: 'CONFIG_APPLY_FAILED', message: 'cannot apply: disk is read-only', retryable: false });
  const view = await waitFor(async () => {
    const v = await viewOf(node.id);
    return v.configError !== null ? v : undefined;
  }, { what: 'the refusal to be recorded' });
  t.match(view.configError, { version: Number(push.version), code: 'CONFIG_APPLY_FAILED', message: 'cannot apply: disk is read-only' });
  t.ok(Number.isFinite(Date.parse(view.configError?.at ?? '')), 'with when');
  t.equal(view.appliedConfigVersion, null, 'nothing applied');
  t.ok((view.configVersionsBehind ?? 0) > 0, 'still behind');
  const warned = logLines(gateway, 'node refused config; it keeps its last good config').find((l) => l.nodeId === node.id);
  t.match(warned, { level: 40, version: Number(push.version), code: 'CONFIG_APPLY_FAILED', message: 'cannot apply: disk is read-only' });

  const version = await changeConfig(pool);
  const next = await conn.nextConfigPush('the push of the next change');
  t.equal(next.version, BigInt(version));
  conn.ackConfig(next.version);
  const after = await waitFor(async () => {
    const v = await viewOf(node.id);
    return v.appliedConfigVersion === version ? v : undefined;
  }, { what: 'the next version to be applied' });
  t.equal(after.configError, null, 'an applied version clears the refusal');
  t.equal(after.configVersionsBehind, 0);
});

t.test('an ack for a version that was not pushed changes nothing', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  const push = await conn.nextConfigPush('the push after hello');
  conn.ackConfig(push.version + 1000n);
  conn.ackConfig(push.version);
  await waitFor(async () => (await findNodeById(pool, node.id))?.configSyncedAt, { what: 'the real ack to be recorded' });
  t.equal((await viewOf(node.id)).appliedConfigVersion, Number(push.version), 'the applied version is the one pushed, not the one claimed');
  t.ok(logLines(gateway, 'ignoring a config ack for a version not in flight').some((l) => l.nodeId === node.id && l.version === Number(push.version) + 1000));
});

t.test('a config ack with a malformed code ends the session as MESSAGE_INVALID', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  const push = await conn.nextConfigPush('the push after hello');
  conn.ackConfig(push.version, { code: 'no spaces allowed\n', message: 'x', retryable: false });
  const refusal = await refusalOf(conn, 'the malformed ack');
  t.equal(refusal.code, 'MESSAGE_INVALID');
  t.equal(refusal.status.code, grpc.status.INVALID_ARGUMENT);
  t.match(refusal.message, /configAck\.error\.code/);
});

t.test('a push that is never acknowledged is sent again after the ack timeout', async (t) => {
  const patient = await startTestGateway(t, { pool, settings, identity, configAckTimeoutMs: 200 });
  gateways.push(patient);
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, patient.server.port, identity.caPem, node);
  const first = await conn.nextConfigPush('the push after hello');
  // Heartbeats are the safety net that notices; keep sending them until the push comes again.
  const again = await waitFor(() => {
    conn.send(heartbeat());
    return conn.configPushes[1];
  }, { timeoutMs: 15_000, intervalMs: 100, what: 'the push to be sent again' });
  t.equal(again.version, first.version);
  t.ok(logLines(patient, 'no ack for a config push; taking it as lost').some((l) => l.nodeId === node.id));
});

t.test('two gateways on one database both push a change to their own nodes', async (t) => {
  const otherPool = testPool(t, db.url);
  const other = await startTestGateway(t, { pool: otherPool, settings, identity });
  gateways.push(other);
  const here = await enrolledNode(pool, settings);
  const there = await enrolledNode(pool, settings);
  const a = await liveSession(t, port, identity.caPem, here);
  const b = await liveSession(t, other.server.port, identity.caPem, there);
  for (const conn of [a.conn, b.conn]) conn.ackConfig((await conn.nextConfigPush('the push after hello')).version);

  const version = await changeConfig(pool);
  const [pa, pb] = await Promise.all([a.conn.nextConfigPush('the change on gateway 1'), b.conn.nextConfigPush('the change on gateway 2')]);
  t.equal(pa.version, BigInt(version));
  t.equal(pb.version, BigInt(version));
  t.equal(opened(pb).nodeId, there.id, "the other gateway's bundle is its own node's");
  t.ok(logLines(other, 'config pushed').some((l) => l.version === version), 'pushed by the other gateway itself');
});

t.test('no log line of any gateway carries a provider secret or a bundle', async (t) => {
  // Runs last: every push above has been logged by now, at debug level.
  const text = gateways.map((g) => g.log.text()).join('');
  t.ok(gateways.every((g) => logLines(g, 'config pushed').length > 0), 'every gateway logged pushes');
  t.notOk(text.includes(seeded.upstreamSecret), 'the upstream secret is in no log line');
  t.notOk(text.includes(seeded.keySha256), 'nor a key hash');
  t.notOk(text.includes('"apiKeys"'), 'nor any bundle');
});
