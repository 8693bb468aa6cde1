// A retry sent exactly Retry-After seconds after a refusal, with nothing charged meanwhile, is
// admitted: the wait and the check that admits agree to the last rounding error of the previous
// minute's weighted share (15 × (1 − 1/3) came to 10.000000000000002 and refused the retry). Both
// stores, and a scan of the arithmetic over small limits.
import t from 'tap';
import type { Test } from 'tap';
import type { LimitStore } from '../../../edge-node/src/rate-limit/limit-store.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { WINDOW_MS, fits, msUntilFits } from '../../../edge-node/src/rate-limit/sliding-window.js';
import type { WindowCounts } from '../../../edge-node/src/rate-limit/sliding-window.js';
import { SqliteLimitStore } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { ManualClock, T0, callContext, finish, quietLogger } from './limit-fixtures.js';

const stores: Array<[string, (t: Test, clock: ManualClock) => LimitStore]> = [
  ['memory', () => new MemoryLimitStore()],
  ['sqlite', (t, clock) => new SqliteLimitStore({ location: t.testdir(), clock, heartbeatTimer: false })],
];

for (const [name, makeStore] of stores) {
  t.test(`${name}: a retry at exactly Retry-After after a requests-per-minute refusal is admitted`, async (t) => {
    const clock = new ManualClock(T0 - 60_000);
    const limiter = new NodeRateLimiter(makeStore(t, clock), quietLogger);
    t.teardown(() => limiter.close());
    const keyLimits = { requestsPerMinute: 15 };
    const send = (): { ok: boolean; retryAfter: string | undefined } => {
      const ctx = callContext(clock, { keyLimits });
      const ok = limiter.admit(ctx) === undefined;
      finish(ctx);
      return { ok, retryAfter: ctx.responseHeaders['retry-after'] };
    };
    for (let i = 0; i < 15; i++) t.ok(send().ok, `previous minute: request ${i + 1} of 15`);
    for (const second of [4, 8, 12, 16]) {
      clock.ms = T0 + second * 1_000;
      t.ok(send().ok, `this minute, at ${second} s`);
    }
    const refused = send();
    t.notOk(refused.ok, 'the fifth at 16 s is refused');
    t.equal(refused.retryAfter, '4', '15 × (1 − f) + 4 + 1 ≤ 15 from f = 1/3: 20 s into the minute');
    clock.ms = T0 + 16_000 + Number(refused.retryAfter) * 1_000;
    t.ok(send().ok, 'the retry at exactly Retry-After is admitted');
  });
}

/** The counts `minutes` whole minutes later with nothing charged: the current minute becomes the previous one. */
function rolled(counts: WindowCounts, minutes: number): WindowCounts {
  if (minutes === 0) return counts;
  return minutes === 1 ? { prev: counts.cur, cur: 0 } : { prev: 0, cur: 0 };
}

t.test('over every window of limits up to 30, a retry at the whole-second Retry-After fits', async (t) => {
  const minuteStart = T0;
  const missed: string[] = [];
  let refusals = 0;
  for (let limit = 1; limit <= 30; limit++) {
    for (let prev = 0; prev <= limit; prev++) {
      for (let cur = 0; cur <= limit; cur++) {
        for (let second = 0; second < 60; second++) {
          const now = minuteStart + second * 1_000;
          const counts = { prev, cur };
          if (fits(counts, 1, limit, now)) continue;
          refusals++;
          const retryAfterS = Math.max(1, Math.ceil(msUntilFits(counts, 1, limit, now) / 1_000));
          const at = now + retryAfterS * 1_000;
          const later = rolled(counts, Math.floor(at / WINDOW_MS) - Math.floor(now / WINDOW_MS));
          if (!fits(later, 1, limit, at)) missed.push(`limit ${limit}, prev ${prev}, cur ${cur}, at ${second} s: Retry-After ${retryAfterS}`);
        }
      }
    }
  }
  t.ok(refusals > 10_000, `${refusals} refusals scanned`);
  t.same(missed.slice(0, 5), [], `${missed.length} retries at Retry-After refused again`);
});

t.test('sqlite: a replica whose clock reads just before a minute another replica has already written gives a Retry-After counted from that minute, and no remaining requests on a refusal', async (t) => {
  // Replica A read its clock 100 ms before the boundary (then, say, waited for the write lock);
  // replica B had admitted in the new minute meanwhile. The store judges A by the new minute.
  const dir = t.testdir();
  const clockA = new ManualClock(T0 + 30_000);
  const clockB = new ManualClock(T0 + 30_000);
  const a = new NodeRateLimiter(new SqliteLimitStore({ location: dir, clock: clockA, heartbeatTimer: false }), quietLogger);
  const b = new NodeRateLimiter(new SqliteLimitStore({ location: dir, clock: clockB, heartbeatTimer: false }), quietLogger);
  t.teardown(() => {
    a.close();
    b.close();
  });
  const keyLimits = { requestsPerMinute: 10 };
  const send = (limiter: NodeRateLimiter, clock: ManualClock): { ok: boolean; headers: Record<string, string> } => {
    const ctx = callContext(clock, { keyLimits });
    const ok = limiter.admit(ctx) === undefined;
    finish(ctx);
    return { ok, headers: ctx.responseHeaders };
  };
  for (let i = 0; i < 5; i++) t.ok(send(a, clockA).ok, `A, minute M: ${i + 1} of 5`);
  clockB.ms = T0 + 60_000;
  for (let i = 0; i < 5; i++) t.ok(send(b, clockB).ok, `B, at M+1:00.000: ${i + 1} of 5`);
  clockA.ms = T0 + 59_900;
  const refused = send(a, clockA);
  t.notOk(refused.ok, 'A is refused: the window holds 10');
  t.equal(refused.headers['x-ratelimit-remaining-requests'], '0', 'a refusal for requests per minute leaves none remaining');
  const retryAfter = Number(refused.headers['retry-after']);
  // From M+1:00, 5 + 5 × (1 − f) + 1 ≤ 10 needs f ≥ 1/5: 12 s into the minute, 12.1 s from A's clock.
  t.equal(retryAfter, 13, 'counted from A\'s clock, the wait to 12.1 s rounded up');
  clockB.ms = T0 + 59_900 + (retryAfter - 1) * 1_000;
  t.notOk(send(b, clockB).ok, 'a second sooner is still refused');
  clockB.ms = T0 + 59_900 + retryAfter * 1_000;
  t.ok(send(b, clockB).ok, 'the retry at Retry-After is admitted');
});
