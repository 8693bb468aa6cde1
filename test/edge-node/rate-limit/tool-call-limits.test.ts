// Tool calls (the mcp API) count against requests/min and concurrency but not tokens/min
// (docs/billing.md, "Tool calls"); with nothing else to check they cost no limit-store round trip,
// which with replicas is a write transaction on the shared SQLite file.
import t from 'tap';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { ManualClock, T0, callContext, finish, quietLogger } from './limit-fixtures.js';

t.test('a tool call of a key limited only by tokens/min does not touch the limit store (no write transaction with replicas)', async (t) => {
  const clock = new ManualClock(T0);
  const store = new MemoryLimitStore();
  let admits = 0;
  const admit = store.admit.bind(store);
  store.admit = (query) => {
    admits++;
    return admit(query);
  };
  const limiter = new NodeRateLimiter(store, quietLogger);
  t.teardown(() => limiter.close());
  const tool = callContext(clock, { api: 'mcp', keyLimits: { tokensPerMinute: 10 }, accountLimits: { tokensPerMinute: 10 } });
  t.equal(limiter.admit(tool), undefined, 'admitted');
  finish(tool);
  t.equal(admits, 0, 'nothing to check, so no store round trip');
  const chat = callContext(clock, { keyLimits: { tokensPerMinute: 10_000 } });
  t.equal(limiter.admit(chat), undefined);
  finish(chat);
  t.equal(admits, 1, 'a model request of the same limits is checked');
});
