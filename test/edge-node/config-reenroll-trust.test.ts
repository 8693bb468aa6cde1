// `zenova-node enroll --reenroll` while node-edge serves: the connect loop rereads identity.json on
// every attempt, and the config applier's trust (node id, config-signing key) now follows it, so a
// bundle signed with the new control plane's key is applied without a restart. The config served
// meanwhile is the previous installation's: hello and heartbeats count it as none, or a control
// plane with lower version numbers would take the node as synced and never push.
import path from 'node:path';
import t from 'tap';
import type { ConfigPush } from '../../proto/src/index.js';
import { saveIdentity } from '../../edge-node/src/state/identity.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import { formatNodeStatus, readNodeStatus } from '../../edge-node/src/status/node-status.js';
import { parseJsonLines } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';
import type { FakeSession } from './control-fixtures.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import { serveNode } from './served-node.js';

/** As the control plane's config sync decides: push `version` only when the hello's applied version is behind it. */
function pushIfBehind(session: FakeSession, version: number, push: ConfigPush): boolean {
  const hello = session.received.find((m) => m.hello !== undefined)?.hello;
  if (hello === undefined || BigInt(version) <= hello.appliedConfigVersion) return false;
  session.send({ configPush: push });
  return true;
}

t.test('after a re-enrollment with a new signing key and node id, the node reports no applied version until pushes signed with it are applied', async (t) => {
  const gateway = await startFakeGateway(t);
  const oldSigner = createSigner();
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway, { configSigningPublicKeyPem: oldSigner.publicKeyPem });
  const { proc } = await serveNode(t, state.dir);
  const bundle = (nodeId: string, version: number) => testBundle({ nodeId, version, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [bundleKey('k', newCallerKey().sha256)] });

  const first = await gateway.waitForSession(0);
  await waitFor(() => first.received.find((m) => m.hello !== undefined), { what: 'the hello' });
  first.send({ configPush: signedPush(bundle(state.identity.nodeId, 40), oldSigner) });
  t.match(await gateway.waitForConfigAck(first, 40), { ok: true });

  // Re-enrolled (as `enroll --reenroll` writes it): another node id and control plane signing key.
  const newSigner = createSigner();
  const newNodeId = `${state.identity.nodeId}-re`;
  await saveIdentity(state.store, { ...state.identity, nodeId: newNodeId, configSigningPublicKeyPem: newSigner.publicKeyPem, enrolledAt: new Date().toISOString() });
  first.close();

  const second = await gateway.waitForSession(1);
  const hello = await waitFor(() => second.received.find((m) => m.hello !== undefined)?.hello, { what: 'the hello after re-enrollment' });
  t.equal(hello.appliedConfigVersion, 0n, "the hello counts the previous enrollment's version 40 as no config");
  const heartbeat = await gateway.waitForMessage(second, (m) => m.heartbeat !== undefined, 'a heartbeat after re-enrollment');
  t.equal(heartbeat.heartbeat?.appliedConfigVersion, 0n, 'so do heartbeats');
  const url = (JSON.parse(await proc.waitForLine(/node-edge listening/)) as { url: string }).url;
  const before = (await (await fetch(`${url}/readyz`)).json()) as { ready: boolean; configVersion: number; configWarning?: string };
  t.match(before, { ready: true, configVersion: 40, configWarning: /version 40 of this node's previous enrollment/ }, '/readyz still serves, and says whose config it is');
  const store = await openStateStore(state.dir, { create: false });
  const report = await waitFor(async () => {
    const r = await readNodeStatus(store);
    return r.previousEnrollmentWarning !== null ? r : undefined;
  }, { what: 'status to name the previous enrollment' });
  t.match(formatNodeStatus(report), /PREVIOUS ENROLLMENT: serving config version 40/);

  // A lower version: the new control plane's versions are its own; the old mark does not hold.
  t.ok(pushIfBehind(second, 3, signedPush(bundle(newNodeId, 3), newSigner)), 'a control plane at version 3 pushes: the node is behind it');
  t.match(await gateway.waitForConfigAck(second, 3), { ok: true }, 'applied with the new key (not CONFIG_BAD_SIGNATURE), no restart');
  t.ok(parseJsonLines(proc.output()).some((l) => l.msg === 'config trust replaced (the node was re-enrolled): bundles are verified with the new identity from now on'));
  const ready = (await (await fetch(`${url}/readyz`)).json()) as { configVersion: number; configWarning?: string };
  t.equal(ready.configVersion, 3);
  t.equal(ready.configWarning, undefined, "no warning once the new control plane's config is served");
  const synced = await gateway.waitForMessage(second, (m) => m.heartbeat?.appliedConfigVersion === 3n, 'a heartbeat with version 3');
  t.ok(synced, 'heartbeats report the version applied under the new trust');
  await waitFor(async () => ((await readNodeStatus(store)).previousEnrollmentWarning === null ? true : undefined), { what: 'status to drop the warning' });
  second.send({ configPush: signedPush(bundle(newNodeId, 4), oldSigner) });
  t.match(await gateway.waitForConfigAck(second, 4), { ok: false, error: { code: 'CONFIG_BAD_SIGNATURE' } }, 'the old key is no longer trusted');
});
