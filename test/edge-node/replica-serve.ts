// For the tests that run `zenova-node serve --replicas K` as a child process: an enrolled state dir
// whose cached config routes `echo` to a fake upstream, with a fake gateway heartbeating every
// 200 ms, and two replicas served from it with an admin port.
import path from 'node:path';
import type { Test } from 'tap';
import { BundleCache } from '../../edge-node/src/config/bundle-cache.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import type { FakeUpstream } from '../fixtures/fake-upstream.js';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import type { StartedProcess } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import type { FakeGateway } from './control-fixtures.js';

export interface ReplicaScene {
  stateDir: string;
  /** The secret of caller key `k`. */
  callerKey: string;
  upstream: FakeUpstream;
  gateway: FakeGateway;
}

/** An enrolled state dir whose cached config (version 1) routes `echo` to a fake upstream, with a fake gateway heartbeating every 200 ms. */
export async function replicaScene(t: Test): Promise<ReplicaScene> {
  const upstream = await startFakeUpstream(t);
  const gateway = await startFakeGateway(t, { heartbeatIntervalMs: 200 });
  const signer = createSigner();
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway, { configSigningPublicKeyPem: signer.publicKeyPem });
  const key = newCallerKey();
  const push = signedPush(testBundle({ nodeId: state.identity.nodeId, version: 1, upstreamUrl: upstream.url, keys: [bundleKey('k', key.sha256)] }), signer);
  await new BundleCache(state.dir).store({ version: 1, bundle: push.bundle.toString('utf8'), signature: push.signature.toString('base64'), appliedAt: new Date().toISOString() }, undefined);
  return { stateDir: state.dir, callerKey: key.secret, upstream, gateway };
}

/** The JSON lines a process wrote so far. */
export function logs(proc: StartedProcess): Array<Record<string, unknown>> {
  return parseJsonLines(proc.output());
}

/**
 * Two replicas with the admin port on any free port, ZENOVA_LOG_LEVEL unset unless `env` sets it;
 * resolves once both replicas have logged that they listen (each logged its start-up by then).
 */
export async function serveTwoReplicas(t: Test, stateDir: string, env: NodeJS.ProcessEnv = {}, name = 'zenova-node serve --replicas 2'): Promise<StartedProcess> {
  const { command, args } = tsEntry('edge-node/src/main.ts');
  const node = await startProcess({
    name,
    command,
    args: [...args, 'serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0', '--replicas', '2'],
    env: { ZENOVA_NODE_REPLICAS: undefined, ZENOVA_LOG_LEVEL: undefined, ZENOVA_NODE_RECONNECT_BASE_MS: '100', ZENOVA_NODE_RECONNECT_MAX_MS: '500', ...env },
    readyLine: /"msg":"node-edge replicas listening"/,
    timeoutMs: 90_000,
    t,
  });
  await waitFor(() => new Set(logs(node).filter((l) => l.msg === 'node-edge listening').map((l) => l.replica)).size === 2, { what: 'both replicas logging that they listen' });
  return node;
}
