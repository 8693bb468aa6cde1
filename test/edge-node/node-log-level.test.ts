// `zenova-node serve` honours ZENOVA_LOG_LEVEL as the control plane does (fatal, error, warn, info,
// debug, trace, silent; any case; default info): debug lines are written at debug and not at info,
// and a value it does not know stops serve before anything opens (exit 2, one line naming the
// variable and the levels; the value itself only when it looks like a word, as it may be a pasted token).
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { NODE_LOG_LEVELS, readLogLevel } from '../../edge-node/src/cli/serve-settings.js';
import type { StartedProcess } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { runNodeCli } from './cli-capture.js';
import { logs, replicaScene, serveTwoReplicas } from './replica-serve.js';

const DEBUG = 20;
/** What a replica logs at debug once its metrics are set up (create-node-metrics.ts). */
const REPLICA_DEBUG_LINE = 'metrics answered over IPC to the supervisor, which holds the admin port';

/** Two replicas with an admin port, at `level` (undefined: unset); resolves once both have logged that they listen. */
function serveAtLevel(t: Test, stateDir: string, level: string | undefined): Promise<StartedProcess> {
  return serveTwoReplicas(t, stateDir, { ZENOVA_LOG_LEVEL: level }, `zenova-node serve --replicas 2 at ${level ?? 'the default level'}`);
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
  const { stateDir } = await replicaScene(t);
  const atDebug = await serveAtLevel(t, stateDir, 'debug');
  await waitFor(() => new Set(logs(atDebug).filter((l) => l.msg === REPLICA_DEBUG_LINE).map((l) => l.replica)).size === 2, { what: "each replica's debug line" });
  t.ok(logs(atDebug).filter((l) => l.msg === REPLICA_DEBUG_LINE).every((l) => l.level === DEBUG), 'at level debug');
  t.equal(await atDebug.stop('SIGTERM', 40_000), 0);

  const atInfo = await serveAtLevel(t, stateDir, undefined);
  t.equal(await atInfo.stop('SIGTERM', 40_000), 0);
  // Everything the node logged from start to stop, the replicas' start-up included.
  t.same(logs(atInfo).filter((l) => Number(l.level) < 30), [], 'no line below info');
  t.ok(logs(atInfo).length > 0);
});
