// The node's rate limiter with an injected clock: each limit per key and per account, rolling
// windows, Retry-After, x-ratelimit-* headers, token true-up and concurrency release — against
// both stores (memory for a stand-alone node, SQLite for an enrolled one).
import t from 'tap';
import type { Test } from 'tap';
import type { LimitStore } from '../../../edge-node/src/rate-limit/limit-store.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter, formatReset } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { rateLimitHitOf } from '../../../edge-node/src/rate-limit/rate-limit-hits.js';
import { SqliteLimitStore } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { ManualClock, callContext, finish, quietLogger } from './limit-fixtures.js';
import type { CallOptions } from './limit-fixtures.js';

type Tap = Test;

const stores: Array<{ name: string; open: (t: Tap, clock: ManualClock) => LimitStore }> = [
  { name: 'memory', open: () => new MemoryLimitStore() },
  { name: 'sqlite', open: (tt, clock) => new SqliteLimitStore({ location: tt.testdir(), clock, heartbeatTimer: false }) },
];

for (const { name, open } of stores) {
  t.test(`with the ${name} store`, async (t) => {
    const setup = (tt: Tap): { clock: ManualClock; limiter: NodeRateLimiter; call: (opts?: CallOptions) => ReturnType<typeof callContext> } => {
      const clock = new ManualClock();
      const limiter = new NodeRateLimiter(open(tt, clock), quietLogger);
      tt.teardown(() => limiter.close());
      return { clock, limiter, call: (opts) => callContext(clock, opts) };
    };

    t.test('a key without limits is admitted at once with no headers, only counted in flight until it ends', async (t) => {
      const { limiter, call } = setup(t);
      for (let i = 0; i < 50; i++) {
        const ctx = call();
        t.equal(limiter.admit(ctx), undefined);
        t.same(ctx.responseHeaders, {});
        t.equal(ctx.cleanups.length, 1, 'one cleanup: it stops counting (a limit set later counts it meanwhile)');
        finish(ctx);
      }
    });

    t.test('a key refuses the request past its requests per minute, naming the limit, with Retry-After', async (t) => {
      const { limiter, call } = setup(t);
      const keyLimits = { requestsPerMinute: 3 };
      for (let i = 0; i < 3; i++) t.equal(limiter.admit(call({ keyLimits })), undefined, `request ${i + 1} admitted`);
      const ctx = call({ keyLimits });
      const rejection = limiter.admit(ctx);
      t.equal(rejection?.error.code, 'ZN_ERR_RATE_LIMITED');
      t.match(rejection?.error.message, /requests per minute for this key \(limit 3\)/);
      // 3 in this minute: the window lets one more in once 3 × (1 − g) ≤ 2, i.e. 20 s into the next minute.
      t.equal(ctx.responseHeaders['retry-after'], '80');
      t.equal(ctx.responseHeaders['x-ratelimit-remaining-requests'], '0');
      t.same(rateLimitHitOf(ctx), { scope: 'key', limit: 'requests' });
    });

    t.test('another key is not held back by a key that reached its limit', async (t) => {
      const { limiter, call } = setup(t);
      const keyLimits = { requestsPerMinute: 1 };
      t.equal(limiter.admit(call({ keyLimits })), undefined);
      t.equal(limiter.admit(call({ keyLimits }))?.error.code, 'ZN_ERR_RATE_LIMITED');
      t.equal(limiter.admit(call({ keyId: 'key-b', keyLimits })), undefined);
    });

    t.test('the window rolls over: Retry-After is exact, and two minutes later the limit is whole again', async (t) => {
      const { clock, limiter, call } = setup(t);
      const keyLimits = { requestsPerMinute: 3 };
      for (let i = 0; i < 3; i++) limiter.admit(call({ keyLimits }));
      clock.advance(79_000);
      const early = call({ keyLimits });
      t.equal(limiter.admit(early)?.error.code, 'ZN_ERR_RATE_LIMITED', 'refused a second before Retry-After');
      t.equal(early.responseHeaders['retry-after'], '1');
      clock.advance(1_000);
      t.equal(limiter.admit(call({ keyLimits })), undefined, 'admitted when Retry-After has passed');
      clock.advance(120_000);
      for (let i = 0; i < 3; i++) t.equal(limiter.admit(call({ keyLimits })), undefined, `fresh window request ${i + 1}`);
      t.equal(limiter.admit(call({ keyLimits }))?.error.code, 'ZN_ERR_RATE_LIMITED');
    });

    t.test("an account's requests per minute are shared by all its keys", async (t) => {
      const { limiter, call } = setup(t);
      const accountLimits = { requestsPerMinute: 2 };
      t.equal(limiter.admit(call({ keyId: 'key-a', accountLimits })), undefined);
      t.equal(limiter.admit(call({ keyId: 'key-b', accountLimits })), undefined);
      const ctx = call({ keyId: 'key-c', accountLimits });
      const rejection = limiter.admit(ctx);
      t.equal(rejection?.error.code, 'ZN_ERR_RATE_LIMITED');
      t.match(rejection?.error.message, /requests per minute for this account \(limit 2\)/);
      t.same(rateLimitHitOf(ctx), { scope: 'account', limit: 'requests' });
      t.equal(limiter.admit(call({ keyId: 'key-d', accountId: 'acct-2', accountLimits })), undefined, 'another account is unaffected');
    });

    t.test('tokens per minute charge the prompt estimate plus max_tokens, per key and per account', async (t) => {
      const { limiter, call } = setup(t);
      const req = { estimatedInputTokens: 30, maxOutputTokens: 20 };
      const keyLimits = { tokensPerMinute: 100 };
      t.equal(limiter.admit(call({ ...req, keyLimits })), undefined);
      t.equal(limiter.admit(call({ ...req, keyLimits })), undefined);
      const refused = call({ ...req, keyLimits });
      const rejection = limiter.admit(refused);
      t.equal(rejection?.error.code, 'ZN_ERR_RATE_LIMITED');
      t.match(rejection?.error.message, /tokens per minute for this key \(limit 100\)/);
      t.equal(refused.responseHeaders['x-ratelimit-remaining-tokens'], '0');

      const accountLimits = { tokensPerMinute: 100 };
      t.equal(limiter.admit(call({ ...req, keyId: 'k1', accountId: 'acct-t', accountLimits })), undefined);
      t.equal(limiter.admit(call({ ...req, keyId: 'k2', accountId: 'acct-t', accountLimits })), undefined);
      const rejected = limiter.admit(call({ ...req, keyId: 'k3', accountId: 'acct-t', accountLimits }));
      t.match(rejected?.error.message, /tokens per minute for this account/);
    });

    t.test('a request without max_tokens is charged the default output estimate; embeddings only their input', async (t) => {
      const { limiter, call } = setup(t);
      const keyLimits = { tokensPerMinute: 2000 };
      const chat = call({ keyLimits, estimatedInputTokens: 10 });
      limiter.admit(chat);
      t.equal(chat.responseHeaders['x-ratelimit-remaining-tokens'], String(2000 - 10 - 1024));
      const embeddings = call({ keyLimits, api: 'embeddings', estimatedInputTokens: 10 });
      limiter.admit(embeddings);
      t.equal(embeddings.responseHeaders['x-ratelimit-remaining-tokens'], String(2000 - 20 - 1024));
    });

    t.test('a request without max_tokens estimated above the whole token limit is still admitted into an empty window', async (t) => {
      const { limiter, call } = setup(t);
      t.equal(limiter.admit(call({ keyLimits: { tokensPerMinute: 100 }, estimatedInputTokens: 500 })), undefined);
      t.equal(limiter.admit(call({ keyLimits: { tokensPerMinute: 100 }, estimatedInputTokens: 1 }))?.error.code, 'ZN_ERR_RATE_LIMITED');
    });

    t.test('a request whose prompt plus max_tokens is larger than the tokens per minute is refused at once, not to be retried, charging nothing', async (t) => {
      const { limiter, call } = setup(t);
      const keyLimits = { requestsPerMinute: 1, tokensPerMinute: 1_000 };
      const tooLarge = call({ keyLimits, estimatedInputTokens: 10, maxOutputTokens: 991 });
      const rejection = limiter.admit(tooLarge);
      t.equal(rejection?.error.code, 'ZN_ERR_RATE_LIMITED');
      t.equal(rejection?.error.status, 429);
      t.equal(rejection?.error.retryable, false, 'x-should-retry: false');
      t.match(rejection?.error.message, /^Request too large for the tokens per minute limit of this key: limit 1000, requested 1001/);
      t.equal(tooLarge.responseHeaders['retry-after'], undefined, 'no wait makes it fit');
      t.same(rateLimitHitOf(tooLarge), { scope: 'key', limit: 'tokens' });

      const accountLarge = call({ keyId: 'key-b', accountLimits: { tokensPerMinute: 500 }, estimatedInputTokens: 10, maxOutputTokens: 491 });
      t.match(limiter.admit(accountLarge)?.error.message, /^Request too large for the tokens per minute limit of this account: limit 500, requested 501/);

      const fitting = call({ keyLimits, estimatedInputTokens: 10, maxOutputTokens: 990 });
      t.equal(limiter.admit(fitting), undefined, 'exactly the limit is admitted, and the refusal used none of requests/min');
    });

    t.test('the token charge is trued up with the real usage when the request ends, both ways', async (t) => {
      const { limiter, call } = setup(t);
      const keyLimits = { tokensPerMinute: 100 };
      const first = call({ keyLimits, estimatedInputTokens: 40, maxOutputTokens: 20 });
      t.equal(limiter.admit(first), undefined);
      finish(first, { inputTokens: 5, outputTokens: 5 });
      // 10 used, not 60: another 60 fits, which it would not without the true-up.
      const second = call({ keyLimits, estimatedInputTokens: 40, maxOutputTokens: 20 });
      t.equal(limiter.admit(second), undefined);
      t.equal(second.responseHeaders['x-ratelimit-remaining-tokens'], '30');
      finish(second, { inputTokens: 40, outputTokens: 45 });
      // 10 + 85 used: a request of 10 no longer fits.
      t.equal(limiter.admit(call({ keyLimits, estimatedInputTokens: 5, maxOutputTokens: 5 }))?.error.code, 'ZN_ERR_RATE_LIMITED');
    });

    t.test('a stream that ends in a later minute counts its whole usage in the minute it ended, for key and account', async (t) => {
      for (const laterMs of [70_000, 150_000, 600_000]) {
        const { clock, limiter, call } = setup(t);
        clock.advance(5_000);
        const keyLimits = { tokensPerMinute: 10_000 };
        const accountLimits = { tokensPerMinute: 20_000 };
        // No max_tokens, as SDK chat streams send: charged 10 + 1024 on admission.
        const stream = call({ keyLimits, accountLimits, estimatedInputTokens: 10 });
        t.equal(limiter.admit(stream), undefined);
        clock.advance(laterMs);
        finish(stream, { inputTokens: 10, outputTokens: 9_490 });
        // The estimate left the admission minute; the 9 500 tokens count in full now.
        const small = call({ keyLimits, accountLimits, estimatedInputTokens: 1, maxOutputTokens: 1 });
        t.equal(limiter.admit(small), undefined, `ended ${laterMs / 1000} s later: a small request fits`);
        t.equal(small.responseHeaders['x-ratelimit-remaining-tokens'], String(10_000 - 9_500 - 2), `ended ${laterMs / 1000} s later: remaining`);
        const big = call({ keyLimits, estimatedInputTokens: 1_000, maxOutputTokens: 1_000 });
        t.equal(limiter.admit(big)?.error.code, 'ZN_ERR_RATE_LIMITED', `ended ${laterMs / 1000} s later: 2 000 more do not fit`);
        const otherKey = call({ keyId: 'key-b', accountLimits, estimatedInputTokens: 5_000, maxOutputTokens: 5_500 });
        t.equal(limiter.admit(otherKey)?.error.code, 'ZN_ERR_RATE_LIMITED', `ended ${laterMs / 1000} s later: the account counted it too`);
      }
    });

    t.test('a stream that ends in the next minute gives back the estimate from the minute it was admitted in', async (t) => {
      const { clock, limiter, call } = setup(t);
      const keyLimits = { tokensPerMinute: 1_000 };
      const stream = call({ keyLimits, estimatedInputTokens: 500, maxOutputTokens: 400 });
      t.equal(limiter.admit(stream), undefined);
      clock.advance(60_000); // the next minute's start: the previous minute still counts in full
      finish(stream, { inputTokens: 50, outputTokens: 50 });
      const next = call({ keyLimits, estimatedInputTokens: 400, maxOutputTokens: 400 });
      t.equal(limiter.admit(next), undefined, '900 estimated, 100 used: 800 more fit');
      t.equal(next.responseHeaders['x-ratelimit-remaining-tokens'], '100');
    });

    t.test('a request that costs no tokens is not refused by a full tokens window; requests per minute still count it', async (t) => {
      const { limiter, call } = setup(t);
      const keyLimits = { requestsPerMinute: 3, tokensPerMinute: 100 };
      t.equal(limiter.admit(call({ keyLimits, estimatedInputTokens: 50, maxOutputTokens: 50 })), undefined, 'the tokens window is full');
      const models = call({ keyLimits, api: 'models' });
      t.equal(limiter.admit(models), undefined, 'GET /v1/models is served');
      t.equal(models.responseHeaders['x-ratelimit-remaining-tokens'], '0');
      t.equal(limiter.admit(call({ keyLimits, api: 'models' })), undefined);
      const over = limiter.admit(call({ keyLimits, api: 'models' }));
      t.equal(over?.error.code, 'ZN_ERR_RATE_LIMITED');
      t.match(over?.error.message, /requests per minute/);
      t.equal(limiter.admit(call({ keyLimits: { tokensPerMinute: 100 }, keyId: 'key-a', estimatedInputTokens: 1, maxOutputTokens: 1 }))?.error.code, 'ZN_ERR_RATE_LIMITED', 'a request that costs tokens is still refused');
    });

    t.test('a rejected or failed request gives back its whole token estimate', async (t) => {
      const { limiter, call } = setup(t);
      const keyLimits = { tokensPerMinute: 100 };
      const failed = call({ keyLimits, estimatedInputTokens: 50, maxOutputTokens: 50 });
      t.equal(limiter.admit(failed), undefined);
      finish(failed); // usage stays 0: refused upstream of the model, nothing was used
      t.equal(limiter.admit(call({ keyLimits, estimatedInputTokens: 50, maxOutputTokens: 50 })), undefined);
    });

    t.test('concurrency per key: the slot is held until the request ends, whatever its outcome', async (t) => {
      const { limiter, call } = setup(t);
      const keyLimits = { concurrentRequests: 2 };
      const a = call({ keyLimits });
      const b = call({ keyLimits });
      t.equal(limiter.admit(a), undefined);
      t.equal(limiter.admit(b), undefined);
      const c = call({ keyLimits });
      const rejection = limiter.admit(c);
      t.equal(rejection?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED');
      t.match(rejection?.error.message, /at once for this key \(limit 2\)/);
      t.equal(c.responseHeaders['retry-after'], '1');
      t.same(rateLimitHitOf(c), { scope: 'key', limit: 'concurrency' });
      t.equal(c.cleanups.length, 0, 'a refused request holds nothing');
      a.outcome = { status: 'failed', httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_ERROR' };
      finish(a);
      t.equal(limiter.admit(call({ keyLimits })), undefined, 'the failed request freed its slot');
      t.equal(limiter.admit(call({ keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED');
    });

    t.test('two requests under one caller-chosen request id hold two slots', async (t) => {
      const { limiter, call } = setup(t);
      const keyLimits = { concurrentRequests: 2 };
      const a = { ...call({ keyLimits }), requestId: 'same' };
      const b = { ...call({ keyLimits }), requestId: 'same' };
      t.equal(limiter.admit(a), undefined);
      t.equal(limiter.admit(b), undefined);
      finish(a);
      t.equal(limiter.admit(call({ keyLimits })), undefined, 'one freed');
      t.equal(limiter.admit(call({ keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', "b's slot is still held");
    });

    t.test("concurrency per account counts every key of the account", async (t) => {
      const { limiter, call } = setup(t);
      const accountLimits = { concurrentRequests: 1 };
      const a = call({ keyId: 'k1', accountLimits });
      t.equal(limiter.admit(a), undefined);
      const rejection = limiter.admit(call({ keyId: 'k2', accountLimits }));
      t.equal(rejection?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED');
      t.match(rejection?.error.message, /for this account/);
      finish(a);
      t.equal(limiter.admit(call({ keyId: 'k2', accountLimits })), undefined);
    });

    t.test('a request refused by a rate limit takes no concurrency slot and charges nothing', async (t) => {
      const { limiter, call } = setup(t);
      const keyLimits = { requestsPerMinute: 1, concurrentRequests: 1 };
      const accountLimits = { requestsPerMinute: 1 };
      const a = call({ keyLimits });
      t.equal(limiter.admit(a), undefined);
      finish(a);
      // refused by the key's rpm: the account's request count must not move either.
      t.equal(limiter.admit(call({ keyLimits }))?.error.code, 'ZN_ERR_RATE_LIMITED');
      t.equal(limiter.admit(call({ keyId: 'key-b', accountLimits })), undefined, 'the account still has its one request');
    });

    t.test('headers describe the tightest limit of each kind', async (t) => {
      const { limiter, call } = setup(t);
      const ctx = call({
        keyLimits: { requestsPerMinute: 10, tokensPerMinute: 1000 },
        accountLimits: { requestsPerMinute: 5, tokensPerMinute: 5000 },
        estimatedInputTokens: 100,
        maxOutputTokens: 100,
      });
      t.equal(limiter.admit(ctx), undefined);
      t.same(ctx.responseHeaders, {
        'x-ratelimit-limit-requests': '5',
        'x-ratelimit-remaining-requests': '4',
        'x-ratelimit-reset-requests': '2m0s',
        'x-ratelimit-limit-tokens': '1000',
        'x-ratelimit-remaining-tokens': '800',
        'x-ratelimit-reset-tokens': '2m0s',
      });
    });
  });
}

t.test('reset durations read like OpenAI\'s', async (t) => {
  t.equal(formatReset(0), '0s');
  t.equal(formatReset(250), '250ms');
  t.equal(formatReset(6_500), '7s');
  t.equal(formatReset(66_000), '1m6s');
});

t.test('the memory store forgets a subject once its windows are two minutes old, and counts it afresh after', async (t) => {
  const clock = new ManualClock();
  const store = new MemoryLimitStore();
  const limiter = new NodeRateLimiter(store, quietLogger);
  t.teardown(() => limiter.close());
  const keyLimits = { requestsPerMinute: 2, tokensPerMinute: 100_000 };
  t.equal(limiter.admit(callContext(clock, { keyLimits })), undefined);
  t.equal(limiter.admit(callContext(clock, { keyId: 'key-b', keyLimits })), undefined);
  t.equal(store.trackedSubjects(), 2, 'one subject per key');
  clock.advance(60_000);
  t.equal(limiter.admit(callContext(clock, { keyLimits })), undefined, 'key-a again, the next minute');
  t.equal(store.trackedSubjects(), 2, 'key-b, last seen a minute ago, still counts in the sliding window');
  clock.advance(60_000);
  t.equal(limiter.admit(callContext(clock, { keyLimits })), undefined);
  t.equal(store.trackedSubjects(), 1, 'key-b, idle for two minutes, is forgotten');
  // key-a has one request in the previous minute and one in this one; at the minute's start the
  // previous minute counts in full, so with a limit of 2 a third is refused.
  t.equal(limiter.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_RATE_LIMITED', 'key-a is still counted across the minutes');
});

t.test('the memory store forgets a subject’s concurrency count once its last request finishes, and counts it afresh after', async (t) => {
  const clock = new ManualClock();
  const store = new MemoryLimitStore();
  const limiter = new NodeRateLimiter(store, quietLogger);
  t.teardown(() => limiter.close());
  const limits = { concurrentRequests: 1 };
  for (let i = 0; i < 100; i++) {
    const ctx = callContext(clock, { keyId: `key-${i}`, accountId: `acct-${i}`, keyLimits: limits, accountLimits: limits });
    t.equal(limiter.admit(ctx), undefined);
    finish(ctx);
  }
  t.equal(store.subjectsInFlight(), 0, 'a hundred keys and accounts served, none remembered');
  const running = callContext(clock, { keyLimits: limits });
  t.equal(limiter.admit(running), undefined);
  t.equal(store.subjectsInFlight(), 1, 'the key in flight is');
  t.equal(limiter.admit(callContext(clock, { keyLimits: limits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'and still limited');
  finish(running);
  t.equal(limiter.admit(callContext(clock, { keyLimits: limits })), undefined, 'admitted again once it finished');
});
