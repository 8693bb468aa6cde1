// `zenova-node enroll --reenroll` while node-edge serves: the connect loop rereads identity.json on
// every attempt, and the config applier's trust (node id, config-signing key) now follows it, so a
// bundle signed with the new control plane's key is applied without a restart.
import path from 'node:path';
import t from 'tap';
import { saveIdentity } from '../../edge-node/src/state/identity.js';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';

t.test('after a re-enrollment with a new signing key and node id, pushes signed with it are applied', async (t) => {
  const gateway = await startFakeGateway(t);
  const oldSigner = createSigner();
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway, { configSigningPublicKeyPem: oldSigner.publicKeyPem });
  const entry = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({
    name: 'zenova-node',
    command: entry.command,
    args: [...entry.args, 'serve', '--state-dir', state.dir, '--listen', '127.0.0.1:0'],
    env: { ZENOVA_NODE_RECONNECT_BASE_MS: '50', ZENOVA_NODE_RECONNECT_MAX_MS: '300' },
    readyLine: /"msg":"node-edge listening"/,
    t,
  });
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
  await waitFor(() => second.received.find((m) => m.hello !== undefined), { what: 'the hello after re-enrollment' });
  // A lower version: the new control plane's versions are its own; the old mark does not hold.
  second.send({ configPush: signedPush(bundle(newNodeId, 3), newSigner) });
  t.match(await gateway.waitForConfigAck(second, 3), { ok: true }, 'applied with the new key (not CONFIG_BAD_SIGNATURE), no restart');
  t.ok(parseJsonLines(proc.output()).some((l) => l.msg === 'config trust replaced (the node was re-enrolled): bundles are verified with the new identity from now on'));
  const ready = (await (await fetch(`${JSON.parse(await proc.waitForLine(/node-edge listening/)).url}/readyz`)).json()) as { configVersion: number };
  t.equal(ready.configVersion, 3);
  second.send({ configPush: signedPush(bundle(newNodeId, 4), oldSigner) });
  t.match(await gateway.waitForConfigAck(second, 4), { ok: false, error: { code: 'CONFIG_BAD_SIGNATURE' } }, 'the old key is no longer trusted');
});
