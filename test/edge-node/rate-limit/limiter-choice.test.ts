// Which counter store a node uses: in memory for one process, a shared SQLite file in the state dir
// when several replicas serve one node (ZENOVA_NODE_REPLICAS > 1); a bad value stops start-up.
import { existsSync } from 'node:fs';
import path from 'node:path';
import pino from 'pino';
import t from 'tap';
import { ReplicaSettingError, createNodeRateLimiter, replicasFromEnv } from '../../../edge-node/src/rate-limit/create-node-rate-limiter.js';
import { RATE_LIMIT_FILE } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';

const logger = pino({ level: 'silent' });

t.test('a single-process node keeps its counters in memory and writes no file', async (t) => {
  const dir = t.testdir();
  const limiter = await createNodeRateLimiter({ stateDir: dir, logger, env: {} });
  t.teardown(() => limiter.close());
  t.notOk(existsSync(path.join(dir, RATE_LIMIT_FILE)), 'no shared counter file');
});

t.test('a node with several replicas shares its counters in a file in the state dir', async (t) => {
  const dir = t.testdir();
  const limiter = await createNodeRateLimiter({ stateDir: dir, logger, env: { ZENOVA_NODE_REPLICAS: '3' } });
  t.teardown(() => limiter.close());
  t.ok(existsSync(path.join(dir, RATE_LIMIT_FILE)), 'the shared counter file exists');
});

t.test('a replica count that is not a whole number from 1 to 999 is refused naming the variable', async (t) => {
  t.equal(replicasFromEnv({}), 1);
  t.equal(replicasFromEnv({ ZENOVA_NODE_REPLICAS: '4' }), 4);
  for (const bad of ['0', '-1', 'two', '1.5', '1000']) {
    t.throws(() => replicasFromEnv({ ZENOVA_NODE_REPLICAS: bad }), ReplicaSettingError, bad);
    t.throws(() => replicasFromEnv({ ZENOVA_NODE_REPLICAS: bad }), /ZENOVA_NODE_REPLICAS/);
  }
});
