// An enrollment starts the node's config state over: the applied version, when it synced and its
// last refusal belonged to the host (or state dir) before it. A fresh host that serves nothing is
// shown behind by every version until it applies one; a host that kept its config cache is shown
// current from its hello, as the session takes it (no push for what the node already serves).
import t from 'tap';
import { latestConfigVersion } from '../../control-plane/src/config/config-changes.js';
import { issueCredential, revokeNodeCredentials } from '../../control-plane/src/nodes/credentials.js';
import { findNodeById, recordEnrollment } from '../../control-plane/src/nodes/node-repository.js';
import { toNodeView, type NodeView } from '../../control-plane/src/nodes/node-view.js';
import { withTransaction } from '../../control-plane/src/nodes/with-transaction.js';
import { PROTOCOL_VERSION } from '../../proto/src/index.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { changeConfig, seedConfig } from './bundle-seed.js';
import {
  connectNode, enrolledNode, gatewayIdentity, gatewaySettings, harnessSecretBox, helloFor, liveSession, migratedPool, startTestGateway, timingsOf,
  type EnrolledNode,
} from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const gateway = await startTestGateway(t, { pool, settings, identity });
await seedConfig(pool, harnessSecretBox);

async function viewOf(nodeId: string): Promise<NodeView> {
  const row = await findNodeById(pool, nodeId);
  if (row === undefined) throw new Error(`no node ${nodeId}`);
  return toNodeView(row, { offlineAfterMs: settings.nodes.offlineAfterMs });
}

/** As enrollNode does it: the new host's facts recorded, the old credentials revoked, a new one issued. */
async function reenroll(node: EnrolledNode, hostname: string): Promise<string> {
  const issued = await withTransaction(pool, async (client) => {
    await recordEnrollment(client, node.id, { hostname, arch: 'x64', version: '0.1.0', protocolVersion: PROTOCOL_VERSION });
    await revokeNodeCredentials(client, node.id);
    return issueCredential(client, node.id, timingsOf(settings));
  });
  return issued.credential;
}

t.test("a node re-enrolled onto a fresh host is shown behind by every version, without the old host's applied version or refusal, until the new host applies one", async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const applied = await conn.nextConfigPush('the first push');
  conn.ackConfig(applied.version);
  await changeConfig(pool);
  const refused = await conn.nextConfigPush('the push of the change');
  conn.ackConfig(refused.version, { code: 'CONFIG_APPLY_FAILED', message: 'cannot apply', retryable: false });
  const old = await waitFor(async () => {
    const view = await viewOf(node.id);
    return view.appliedConfigVersion === Number(applied.version) && view.configError !== null ? view : undefined;
  }, { what: "the old host's applied version and refusal" });
  t.equal(old.onboardingStage, 'config-synced');
  conn.end();
  await conn.finalStatus('the old host to leave');

  const credential = await reenroll(node, 'fresh-host');
  const latest = await latestConfigVersion(pool);
  const fresh = await viewOf(node.id);
  t.match(fresh, { appliedConfigVersion: null, configError: null, configVersionsBehind: latest, onboardingStage: 'registered', hostname: 'fresh-host' });
  t.equal((await findNodeById(pool, node.id))?.configSyncedAt, null, 'not synced since the enrollment');

  // The new host serves nothing: its hello says 0, and it refuses what it is pushed (a full disk).
  const next = connectNode(t, gateway.server.port, identity.caPem, { nodeId: node.id, credential });
  next.send(helloFor(node, { appliedConfigVersion: 0n }));
  await next.next('HelloAck');
  const push = await next.nextConfigPush('the push to the new host');
  next.ackConfig(push.version, { code: 'CONFIG_CACHE_WRITE_FAILED', message: 'ENOSPC', retryable: true });
  const refusedView = await waitFor(async () => {
    const view = await viewOf(node.id);
    return view.configError?.code === 'CONFIG_CACHE_WRITE_FAILED' ? view : undefined;
  }, { what: "the new host's refusal" });
  t.match(refusedView, { appliedConfigVersion: null, configVersionsBehind: latest }, 'still behind by every version');
  next.end();
});

t.test('a node re-enrolled with its config cache kept, serving the newest version, is shown current from its hello without a push', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const push = await conn.nextConfigPush('the first push');
  conn.ackConfig(push.version);
  await waitFor(async () => (await viewOf(node.id)).appliedConfigVersion === Number(push.version), { what: 'the applied version' });
  conn.end();
  await conn.finalStatus('the session to end');

  const credential = await reenroll(node, 'same-host');
  t.equal((await viewOf(node.id)).appliedConfigVersion, null, 'nothing on record since the enrollment');
  const next = connectNode(t, gateway.server.port, identity.caPem, { nodeId: node.id, credential });
  next.send(helloFor(node, { appliedConfigVersion: push.version }));
  await next.next('HelloAck');
  const view = await waitFor(async () => {
    const v = await viewOf(node.id);
    return v.appliedConfigVersion !== null ? v : undefined;
  }, { what: 'the hello to be recorded' });
  t.match(view, { appliedConfigVersion: Number(push.version), configVersionsBehind: 0, configError: null });
  t.not((await findNodeById(pool, node.id))?.configSyncedAt, null);
  // Handled after the hello's push decision (a session handles messages in order).
  next.send({ heartbeat: { sentAt: BigInt(Date.now()), requests5m: 0n, errors5m: 0n, spoolBytes: 0n, backfillBacklog: 0n, appliedConfigVersion: push.version, ready: true } });
  await waitFor(async () => (await viewOf(node.id)).lastHeartbeatAt !== null, { what: 'the heartbeat to be recorded' });
  t.equal(next.configPushes.length, 0, 'nothing pushed: the node serves the newest version');
  next.end();
});
