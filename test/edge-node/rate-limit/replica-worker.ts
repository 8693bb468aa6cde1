// A node replica's limiter in its own process, for the shared-file tests. Its clock is fixed at the
// Unix ms given, so every replica sees the same window whatever the real time.
// Usage: replica-worker.ts FILE AT_MS admit ATTEMPTS RPM   → prints {"admitted":n} and exits
//        replica-worker.ts FILE AT_MS hold SLOTS LIMIT     → takes SLOTS slots, prints "holding", waits
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { SqliteLimitStore } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { ManualClock, callContext, quietLogger } from './limit-fixtures.js';

const [file, at, mode, count, limit] = process.argv.slice(2);
const clock = new ManualClock(Number(at));
const limiter = new NodeRateLimiter(new SqliteLimitStore({ location: file ?? '', clock }), quietLogger);

if (mode === 'admit') {
  let admitted = 0;
  for (let i = 0; i < Number(count); i++) {
    if (limiter.admit(callContext(clock, { keyLimits: { requestsPerMinute: Number(limit) } })) === undefined) admitted++;
  }
  limiter.close();
  process.stdout.write(`${JSON.stringify({ admitted })}\n`);
} else {
  for (let i = 0; i < Number(count); i++) {
    if (limiter.admit(callContext(clock, { keyLimits: { concurrentRequests: Number(limit) } })) !== undefined) throw new Error('slot refused');
  }
  process.stdout.write('holding\n');
  setInterval(() => undefined, 60_000);
}
