// `zenova-node serve --replicas K --admin-listen …`: only the supervisor listens on the admin port,
// so only it logs "admin listening", with the port it bound. A replica answers the supervisor's
// scrapes over IPC and binds nothing: a line from it would name a port nobody listens on
// (127.0.0.1:0 when asked for any port), and a tool waiting for the line could take that one.
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { BundleCache } from '../../edge-node/src/config/bundle-cache.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import type { StartedProcess } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';

/** An enrolled state dir with a cached config, and its fake gateway. */
async function enrolledStateDir(t: Test): Promise<string> {
  const upstream = await startFakeUpstream(t);
  const gateway = await startFakeGateway(t, { heartbeatIntervalMs: 200 });
  const signer = createSigner();
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway, { configSigningPublicKeyPem: signer.publicKeyPem });
  const key = newCallerKey();
  const push = signedPush(testBundle({ nodeId: state.identity.nodeId, version: 1, upstreamUrl: upstream.url, keys: [bundleKey('k', key.sha256)] }), signer);
  await new BundleCache(state.dir).store({ version: 1, bundle: push.bundle.toString('utf8'), signature: push.signature.toString('base64'), appliedAt: new Date().toISOString() }, undefined);
  return state.dir;
}

/** Two replicas with the admin port on any free port; resolves once both serve (each has logged its start-up by then). */
async function serveTwoReplicas(t: Test, stateDir: string, env: NodeJS.ProcessEnv): Promise<StartedProcess> {
  const { command, args } = tsEntry('edge-node/src/main.ts');
  const node = await startProcess({
    name: 'zenova-node serve --replicas 2',
    command,
    args: [...args, 'serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0', '--replicas', '2'],
    env: { ZENOVA_NODE_REPLICAS: undefined, ZENOVA_LOG_LEVEL: undefined, ZENOVA_NODE_RECONNECT_BASE_MS: '100', ZENOVA_NODE_RECONNECT_MAX_MS: '500', ...env },
    readyLine: /"msg":"node-edge replicas listening"/,
    timeoutMs: 90_000,
    t,
  });
  // Each replica's own "listening" line comes after its metrics were set up.
  await waitFor(() => new Set(logs(node).filter((l) => l.msg === 'node-edge listening').map((l) => l.replica)).size === 2, { what: 'both replicas logging that they listen' });
  return node;
}

function logs(proc: StartedProcess): Array<Record<string, unknown>> {
  return parseJsonLines(proc.output());
}

t.test('with replicas only the supervisor logs "admin listening", with the port it bound', async (t) => {
  const node = await serveTwoReplicas(t, await enrolledStateDir(t), {});
  const lines = logs(node).filter((l) => l.msg === 'admin listening');
  t.equal(lines.length, 1, 'one line, not one per process');
  t.equal(lines[0]?.replica, undefined, "the supervisor's");
  const url = new URL(String(lines[0]?.url));
  t.not(url.port, '0', 'the port it bound, not the one asked for');
  const res = await fetch(`${url.origin}/metrics`);
  t.equal(res.status, 200, 'and the admin port answers there');
  t.match(await res.text(), /zenova_node_replica_up\{replica="1"\} 1/);
  t.equal(await node.stop('SIGTERM', 40_000), 0);
});
