// Retry-After on ZN_ERR_RATE_LIMITED is the longest wait among all the rate limits the request does
// not fit, not only the first one's, so a client that retries after it is not refused again by a
// later limit (here the account's requests/min after the key's tokens/min); the message and the
// metrics still name the first limit that did not fit. Both stores.
import t from 'tap';
import type { LimitStore } from '../../../edge-node/src/rate-limit/limit-store.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { rateLimitHitOf } from '../../../edge-node/src/rate-limit/rate-limit-hits.js';
import { SqliteLimitStore } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { ManualClock, T0, callContext, quietLogger } from './limit-fixtures.js';

const stores: Array<[string, (dir: string, clock: ManualClock) => LimitStore]> = [
  ['memory', () => new MemoryLimitStore()],
  ['sqlite', (dir, clock) => new SqliteLimitStore({ location: dir, clock, heartbeatTimer: false })],
];

for (const [name, makeStore] of stores) {
  t.test(`${name}: a refusal by the key's tokens and the account's requests asks to wait for the longer of the two, and the retry is admitted`, async (t) => {
    const clock = new ManualClock(T0 - 60_000 + 1_000);
    const limiter = new NodeRateLimiter(makeStore(t.testdir(), clock), quietLogger);
    t.teardown(() => limiter.close());
    const keyA = { keyId: 'A', accountId: 'acct-r', keyLimits: { tokensPerMinute: 1_000 }, accountLimits: { requestsPerMinute: 3 }, maxOutputTokens: 0 };
    const keyB = { keyId: 'B', accountId: 'acct-r', keyLimits: {}, accountLimits: { requestsPerMinute: 3 }, maxOutputTokens: 0 };
    // Previous minute: key A spends 900 tokens and one of the account's requests (held open: no true-up).
    t.equal(limiter.admit(callContext(clock, { ...keyA, estimatedInputTokens: 900 })), undefined);
    // This minute: key B spends two more of the account's requests (1 + 2 of 3 at the minute's start).
    clock.ms = T0;
    for (let i = 0; i < 2; i++) t.equal(limiter.admit(callContext(clock, { ...keyB })), undefined);

    // 30 s on, 600 tokens: the key's tokens fit again in ~3.3 s, the account's requests only in 30 s.
    clock.ms = T0 + 30_000;
    const refused = callContext(clock, { ...keyA, estimatedInputTokens: 600 });
    const rejection = limiter.admit(refused);
    t.equal(rejection?.error.code, 'ZN_ERR_RATE_LIMITED');
    t.equal(refused.responseHeaders['retry-after'], '30', 'the account\'s wait, not the key\'s 4 s');
    t.match(rejection?.error.message, /tokens per minute for this key \(limit 1000\)/, 'the message names the first limit that did not fit');
    t.same(rateLimitHitOf(refused), { scope: 'key', limit: 'tokens' }, 'and so do the metrics');

    clock.ms = T0 + 4_000 + 30_000;
    t.equal(limiter.admit(callContext(clock, { ...keyA, estimatedInputTokens: 600 }))?.error.code, 'ZN_ERR_RATE_LIMITED', 'the key\'s wait alone is too short');
    clock.ms = T0 + 30_000 + 30_000;
    t.equal(limiter.admit(callContext(clock, { ...keyA, estimatedInputTokens: 600 })), undefined, 'a retry after Retry-After is admitted');
  });
}
