// ZENOVA_NODE_REPLICAS above 1 needs a state dir, where the replicas share their counters: a
// stand-alone node (--config, no state dir) refuses it at start-up instead of running N processes
// with N times the limits.
import t from 'tap';
import { ReplicaSettingError, createNodeRateLimiter } from '../../../edge-node/src/rate-limit/create-node-rate-limiter.js';
import { quietLogger } from './limit-fixtures.js';

t.test('a stand-alone node with ZENOVA_NODE_REPLICAS above 1 is refused at start-up, saying replicas need a state dir', async (t) => {
  await t.rejects(createNodeRateLimiter({ stateDir: undefined, logger: quietLogger, env: { ZENOVA_NODE_REPLICAS: '3' } }), ReplicaSettingError);
  await t.rejects(createNodeRateLimiter({ stateDir: undefined, logger: quietLogger, env: { ZENOVA_NODE_REPLICAS: '2' } }), /ZENOVA_NODE_REPLICAS=2 needs a state dir/);
});

t.test('a stand-alone node with ZENOVA_NODE_REPLICAS unset or 1 starts with counters in memory', async (t) => {
  for (const env of [{}, { ZENOVA_NODE_REPLICAS: '1' }]) {
    const limiter = await createNodeRateLimiter({ stateDir: undefined, logger: quietLogger, env });
    t.equal((limiter as unknown as { store: object }).store.constructor.name, 'MemoryLimitStore');
    limiter.close();
  }
});
