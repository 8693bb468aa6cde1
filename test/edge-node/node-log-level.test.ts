// `zenova-node serve` honours ZENOVA_LOG_LEVEL as the control plane does (fatal, error, warn, info,
// debug, trace, silent; any case; default info): debug lines are written at debug and not at info,
// and a value it does not know stops serve before anything opens (exit 2, one line naming the
// variable and the levels; the value itself only when it looks like a word, as it may be a pasted token).
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { BundleCache } from '../../edge-node/src/config/bundle-cache.js';
import { NODE_LOG_LEVELS, readLogLevel } from '../../edge-node/src/cli/serve-settings.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import type { StartedProcess } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { runNodeCli } from './cli-capture.js';
import { bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';

const DEBUG = 20;
/** What a replica logs at debug once its metrics are set up (create-node-metrics.ts). */
const REPLICA_DEBUG_LINE = 'metrics answered over IPC to the supervisor, which holds the admin port';

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

function logs(proc: StartedProcess): Array<Record<string, unknown>> {
  return parseJsonLines(proc.output());
}

/** Two replicas with an admin port, at `level` (undefined: unset); resolves once both have logged that they listen. */
async function serveTwoReplicas(t: Test, stateDir: string, level: string | undefined): Promise<StartedProcess> {
  const { command, args } = tsEntry('edge-node/src/main.ts');
  const node = await startProcess({
    name: `zenova-node serve --replicas 2 at ${level ?? 'the default level'}`,
    command,
    args: [...args, 'serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0', '--replicas', '2'],
    env: { ZENOVA_NODE_REPLICAS: undefined, ZENOVA_LOG_LEVEL: level, ZENOVA_NODE_RECONNECT_BASE_MS: '100', ZENOVA_NODE_RECONNECT_MAX_MS: '500' },
    readyLine: /"msg":"node-edge replicas listening"/,
    timeoutMs: 90_000,
    t,
  });
  await waitFor(() => new Set(logs(node).filter((l) => l.msg === 'node-edge listening').map((l) => l.replica)).size === 2, { what: 'both replicas logging that they listen' });
  return node;
}

t.test('ZENOVA_LOG_LEVEL takes the control plane levels in any case; unset or empty is info', async (t) => {
  t.same(NODE_LOG_LEVELS, ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']);
  t.equal(readLogLevel({}), 'info');
  t.equal(readLogLevel({ ZENOVA_LOG_LEVEL: '' }), 'info');
  t.equal(readLogLevel({ ZENOVA_LOG_LEVEL: 'DEBUG' }), 'debug');
  t.equal(readLogLevel({ ZENOVA_LOG_LEVEL: 'warn' }), 'warn');
});

t.test('serve refuses a ZENOVA_LOG_LEVEL it does not know with exit 2 and one line, showing the value only when it looks like a word', async (t) => {
  const saved = process.env.ZENOVA_LOG_LEVEL;
  t.teardown(() => {
    if (saved === undefined) delete process.env.ZENOVA_LOG_LEVEL;
    else process.env.ZENOVA_LOG_LEVEL = saved;
  });
  const stateDir = path.join(t.testdir({}), 'never-opened');
  process.env.ZENOVA_LOG_LEVEL = 'loud';
  const word = await runNodeCli(['serve', '--state-dir', stateDir]);
  t.equal(word.code, 2);
  t.equal(word.stderr, 'zenova-node: ZENOVA_LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got "loud"\n');

  process.env.ZENOVA_LOG_LEVEL = 'sk-proj-Abc123Def456';
  const token = await runNodeCli(['serve', '--state-dir', stateDir]);
  t.equal(token.code, 2);
  t.equal(token.stderr, 'zenova-node: ZENOVA_LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got a value that is not one (not shown: it does not look like a word)\n');
  t.notMatch(token.stderr, /Abc123/);
});

t.test('debug lines are written at ZENOVA_LOG_LEVEL=debug and not at the default info', async (t) => {
  const stateDir = await enrolledStateDir(t);
  const atDebug = await serveTwoReplicas(t, stateDir, 'debug');
  await waitFor(() => new Set(logs(atDebug).filter((l) => l.msg === REPLICA_DEBUG_LINE).map((l) => l.replica)).size === 2, { what: "each replica's debug line" });
  t.ok(logs(atDebug).filter((l) => l.msg === REPLICA_DEBUG_LINE).every((l) => l.level === DEBUG), 'at level debug');
  t.equal(await atDebug.stop('SIGTERM', 40_000), 0);

  const atInfo = await serveTwoReplicas(t, stateDir, undefined);
  t.equal(await atInfo.stop('SIGTERM', 40_000), 0);
  // Everything the node logged from start to stop, the replicas' start-up included.
  t.same(logs(atInfo).filter((l) => Number(l.level) < 30), [], 'no line below info');
  t.ok(logs(atInfo).length > 0);
});
