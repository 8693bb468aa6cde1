// Usage a token true-up adds beyond the admission estimate is debt the following minutes carry, so a
// key used without max_tokens settles at about its tokens/min limit instead of 1.6–2× it (a
// reviewer's scenarios: 8 000-token answers to requests charged prompt + 1 024, one at a time or 12
// at once). Retry-After and x-ratelimit-*-tokens count the debt, and a single huge answer holds its
// key out for at most MAX_DEBT_MINUTES. Both stores, on an injected clock.
import t from 'tap';
import type { Test } from 'tap';
import type { LimitStore } from '../../../edge-node/src/rate-limit/limit-store.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { MAX_DEBT_MINUTES } from '../../../edge-node/src/rate-limit/sliding-window.js';
import { SqliteLimitStore } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { ManualClock, T0, callContext, finish, quietLogger, sqliteReplica } from './limit-fixtures.js';
import type { CallOptions } from './limit-fixtures.js';

const LIMIT = 10_000;
/** What the limit allows in the 10 simulated minutes. */
const TEN_MINUTES_ALLOWED = 10 * LIMIT;

const stores: Array<[string, (t: Test, clock: ManualClock) => LimitStore]> = [
  ['memory', () => new MemoryLimitStore()],
  ['sqlite', (t, clock) => new SqliteLimitStore({ location: t.testdir(), clock, heartbeatTimer: false })],
];

interface Scenario {
  /** Requests sent at once each second (all admitted ones run together, then end). */
  perSecond: number;
  /** Output tokens each answer reports (the prompt is 10). */
  answerTokens: number;
  /** The caller's options for request `i` (limits, keys). */
  request: (i: number) => CallOptions;
}

/** 600 one-second steps: the tokens the admitted requests really used. */
function runTenMinutes(limiter: NodeRateLimiter, clock: ManualClock, store: LimitStore, scenario: Scenario): { used: number; admitted: number } {
  let used = 0;
  let admitted = 0;
  for (let second = 0; second < 600; second++) {
    clock.ms = T0 + second * 1_000;
    // The replicas' heartbeat (which also drops old minutes) runs through the scenario.
    if (store instanceof SqliteLimitStore && second % 10 === 0) store.heartbeat();
    const running = [];
    for (let i = 0; i < scenario.perSecond; i++) {
      const ctx = callContext(clock, { estimatedInputTokens: 10, ...scenario.request(i) });
      if (limiter.admit(ctx) === undefined) running.push(ctx);
    }
    for (const ctx of running) {
      finish(ctx, { inputTokens: 10, outputTokens: scenario.answerTokens });
      used += 10 + scenario.answerTokens;
      admitted++;
    }
  }
  return { used, admitted };
}

for (const [name, makeStore] of stores) {
  t.test(`with the ${name} store`, async (t) => {
    const setup = (tt: Test): { clock: ManualClock; limiter: NodeRateLimiter; store: LimitStore } => {
      const clock = new ManualClock(T0);
      const store = makeStore(tt, clock);
      const limiter = new NodeRateLimiter(store, quietLogger);
      tt.teardown(() => limiter.close());
      return { clock, limiter, store };
    };

    t.test('a key used without max_tokens, one request at a time, settles at about its tokens per minute over 10 minutes', async (t) => {
      const { clock, limiter, store } = setup(t);
      const { used, admitted } = runTenMinutes(limiter, clock, store, { perSecond: 1, answerTokens: 8_000, request: () => ({ keyLimits: { tokensPerMinute: LIMIT } }) });
      t.ok(used <= 1.2 * TEN_MINUTES_ALLOWED, `${used} tokens used in 10 minutes (${admitted} answers), at most 1.2 × ${TEN_MINUTES_ALLOWED}`);
      t.ok(used >= 0.8 * TEN_MINUTES_ALLOWED, `${used} tokens used: the key is not starved either`);
    });

    t.test('a key used without max_tokens by 12 requests at once each second settles at about its tokens per minute over 10 minutes', async (t) => {
      const { clock, limiter, store } = setup(t);
      const { used, admitted } = runTenMinutes(limiter, clock, store, { perSecond: 12, answerTokens: 8_000, request: () => ({ keyLimits: { tokensPerMinute: LIMIT } }) });
      t.ok(used <= 1.2 * TEN_MINUTES_ALLOWED, `${used} tokens used in 10 minutes (${admitted} answers), at most 1.2 × ${TEN_MINUTES_ALLOWED}`);
    });

    t.test("an account's tokens per minute, shared by two keys used without max_tokens, holds the same way", async (t) => {
      const { clock, limiter, store } = setup(t);
      const request = (i: number): CallOptions => ({ keyId: i === 0 ? 'key-1' : 'key-2', accountId: 'acct-d', accountLimits: { tokensPerMinute: LIMIT } });
      const { used, admitted } = runTenMinutes(limiter, clock, store, { perSecond: 2, answerTokens: 8_000, request });
      t.ok(used <= 1.2 * TEN_MINUTES_ALLOWED, `${used} tokens used in 10 minutes (${admitted} answers), at most 1.2 × ${TEN_MINUTES_ALLOWED}`);
    });

    t.test('a key asking max_tokens above its limit uses nothing: each request is refused at once', async (t) => {
      const { clock, limiter, store } = setup(t);
      const { used } = runTenMinutes(limiter, clock, store, { perSecond: 1, answerTokens: 60_000, request: () => ({ keyLimits: { tokensPerMinute: LIMIT }, maxOutputTokens: 100_000 }) });
      t.equal(used, 0);
    });

    t.test('usage beyond the limit shows in Retry-After and x-ratelimit-*-tokens, and a retry at Retry-After is admitted', async (t) => {
      const { clock, limiter } = setup(t);
      const keyLimits = { tokensPerMinute: LIMIT };
      const big = callContext(clock, { keyLimits, estimatedInputTokens: 10 });
      t.equal(limiter.admit(big), undefined);
      finish(big, { inputTokens: 10, outputTokens: 29_990 }); // 30 000: three minutes of the limit

      clock.ms = T0 + 1_000;
      const small = { keyLimits, estimatedInputTokens: 10, maxOutputTokens: 100 };
      const refused = callContext(clock, small);
      t.equal(limiter.admit(refused)?.error.code, 'ZN_ERR_RATE_LIMITED');
      // Minutes 0, 1 and 2 each hold 10 000; 110 more fit once minute 2's share has decayed to 9 890, 0.66 s into minute 3.
      t.equal(refused.responseHeaders['retry-after'], '180');
      t.equal(refused.responseHeaders['x-ratelimit-remaining-tokens'], '0');
      t.equal(refused.responseHeaders['x-ratelimit-reset-tokens'], '3m59s', 'empty once minute 3 is over');

      clock.ms = T0 + 90_000;
      t.equal(limiter.admit(callContext(clock, small))?.error.code, 'ZN_ERR_RATE_LIMITED', 'still held 90 s on: the debt was not forgotten');
      clock.ms = T0 + 180_000;
      t.equal(limiter.admit(callContext(clock, small))?.error.code, 'ZN_ERR_RATE_LIMITED', 'refused a second before Retry-After');
      clock.ms = T0 + 1_000 + 180_000;
      const retry = callContext(clock, small);
      t.equal(limiter.admit(retry), undefined, 'admitted at Retry-After');
      t.equal(retry.responseHeaders['x-ratelimit-remaining-tokens'], String(Math.floor(LIMIT - LIMIT * (59 / 60) - 110)));
    });

    t.test(`a single huge answer holds its key out for at most ${MAX_DEBT_MINUTES} minutes`, async (t) => {
      const { clock, limiter, store } = setup(t);
      const keyLimits = { tokensPerMinute: LIMIT };
      const huge = callContext(clock, { keyLimits, estimatedInputTokens: 10 });
      t.equal(limiter.admit(huge), undefined);
      finish(huge, { inputTokens: 10, outputTokens: 5_000_000 });
      const small = { keyLimits, estimatedInputTokens: 10, maxOutputTokens: 100 };
      clock.ms = T0 + 1_000;
      const refused = callContext(clock, small);
      t.equal(limiter.admit(refused)?.error.code, 'ZN_ERR_RATE_LIMITED');
      t.equal(refused.responseHeaders['retry-after'], String(MAX_DEBT_MINUTES * 60), 'Retry-After: the bound, not 500 minutes');
      for (let minute = 1; minute < MAX_DEBT_MINUTES; minute++) {
        clock.ms = T0 + minute * 60_000 + 30_000;
        if (store instanceof SqliteLimitStore) store.heartbeat();
        t.equal(limiter.admit(callContext(clock, small))?.error.code, 'ZN_ERR_RATE_LIMITED', `held out ${minute}.5 minutes on`);
      }
      clock.ms = T0 + 1_000 + MAX_DEBT_MINUTES * 60_000;
      if (store instanceof SqliteLimitStore) store.heartbeat();
      t.equal(limiter.admit(callContext(clock, small)), undefined, 'admitted at Retry-After');
    });
  });
}

t.test('debt a true-up makes on one replica holds the key on another', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock(T0);
  const a = sqliteReplica(t, dir, clock).limiter;
  const b = sqliteReplica(t, dir, clock).limiter;
  const keyLimits = { tokensPerMinute: LIMIT };
  const onA = callContext(clock, { keyLimits, estimatedInputTokens: 10 });
  t.equal(a.admit(onA), undefined);
  finish(onA, { inputTokens: 10, outputTokens: 29_990 });
  const small = { keyLimits, estimatedInputTokens: 10, maxOutputTokens: 100 };
  clock.ms = T0 + 150_000;
  const onB = callContext(clock, small);
  t.equal(b.admit(onB)?.error.code, 'ZN_ERR_RATE_LIMITED', 'B still counts the debt in minute 2');
  t.equal(onB.responseHeaders['retry-after'], '31');
  clock.ms = T0 + 181_000;
  t.equal(b.admit(callContext(clock, small)), undefined, 'and admits once it has been counted');
});
