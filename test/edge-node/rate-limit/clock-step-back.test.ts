// The wall clock stepping back across a minute boundary (NTP) neither resets nor hides the
// requests/min window: a minute older than the window's current one counts as the current one, so
// no count is lost and no extra requests get through. A large step (an hour) holds nobody out for
// longer than a normal window, and its counts do not come back when the clock catches up. Both stores.
// A token true-up after a step back changes the minute the estimate was charged in (the shared file).
import t from 'tap';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import type { LimitStore } from '../../../edge-node/src/rate-limit/limit-store.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { SqliteLimitStore } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { ManualClock, T0, callContext, finish, quietLogger } from './limit-fixtures.js';

const stores: Array<[string, (dir: string, clock: ManualClock) => LimitStore]> = [
  ['memory', () => new MemoryLimitStore()],
  ['sqlite', (dir, clock) => new SqliteLimitStore({ location: dir, clock, heartbeatTimer: false })],
];

for (const [name, makeStore] of stores) {
  t.test(`${name}: a clock that steps back across a minute boundary keeps the requests already counted`, async (t) => {
    const clock = new ManualClock();
    const limiter = new NodeRateLimiter(makeStore(t.testdir(), clock), quietLogger);
    t.teardown(() => limiter.close());
    const keyLimits = { requestsPerMinute: 5 };
    const admitted = (): boolean => {
      const ctx = callContext(clock, { keyLimits });
      const ok = limiter.admit(ctx) === undefined;
      finish(ctx);
      return ok;
    };
    clock.ms = T0 + 60_000 + 100; // just into the next minute
    for (let i = 0; i < 5; i++) t.ok(admitted(), `request ${i + 1} of 5 admitted`);
    clock.ms = T0 + 59_900; // stepped back 200 ms, into the minute before
    for (let i = 0; i < 5; i++) t.notOk(admitted(), 'refused after the step back: the 5 still count');
    clock.ms = T0 + 60_300; // and forward again
    t.notOk(admitted(), 'refused: the limit still holds');
    clock.ms = T0 + 3 * 60_000;
    t.ok(admitted(), 'admitted once the window has passed');
  });
}

for (const [name, makeStore] of stores) {
  t.test(`${name}: a clock that steps back an hour holds callers no longer than a normal window, with a true Retry-After`, async (t) => {
    const clock = new ManualClock();
    const limiter = new NodeRateLimiter(makeStore(t.testdir(), clock), quietLogger);
    t.teardown(() => limiter.close());
    const keyLimits = { requestsPerMinute: 5 };
    const attempt = (): { ok: boolean; retryAfter: number | undefined } => {
      const ctx = callContext(clock, { keyLimits });
      const ok = limiter.admit(ctx) === undefined;
      const retryAfter = ctx.responseHeaders['retry-after'];
      finish(ctx);
      return { ok, retryAfter: retryAfter === undefined ? undefined : Number(retryAfter) };
    };
    clock.ms = T0 + 3_600_000 + 1_000;
    for (let i = 0; i < 5; i++) t.ok(attempt().ok, `request ${i + 1} of 5 admitted`);
    clock.ms = T0 + 1_000; // an hour back
    const refused = attempt();
    // The memory store keeps the five (as this minute's); the shared file does not read minutes
    // that far ahead. Either way no caller waits for the hour.
    if (!refused.ok) t.ok(refused.retryAfter !== undefined && refused.retryAfter <= 120, `Retry-After ${refused.retryAfter} s: within a window`);
    clock.ms = T0 + 3 * 60_000;
    t.ok(attempt().ok, 'admitted three minutes later, not an hour');
    clock.ms = T0 + 3_599_000; // the clock catches up with the minute the five were counted in
    for (let i = 0; i < 5; i++) t.ok(attempt().ok, `request ${i + 1} of 5 admitted: the hour-old counts do not come back`);
  });
}

t.test('sqlite: after a step back across a minute boundary, a token true-up changes the minute the estimate was charged in', async (t) => {
  const clock = new ManualClock();
  const limiter = new NodeRateLimiter(new SqliteLimitStore({ location: t.testdir(), clock, heartbeatTimer: false }), quietLogger);
  t.teardown(() => limiter.close());
  const keyLimits = { tokensPerMinute: 1_000 };
  const call = (): PipelineContext => callContext(clock, { keyLimits, maxOutputTokens: 400 });
  clock.ms = T0 + 60_000 + 100; // just into the next minute
  const first = call();
  t.equal(limiter.admit(first), undefined, 'the first estimate (400) is charged');
  finish(first, { inputTokens: 0, outputTokens: 400 });
  clock.ms = T0 + 59_900; // stepped back 200 ms: the store charges the newer minute already written
  const second = call();
  t.equal(limiter.admit(second), undefined, 'the second estimate (400) is charged in that minute too');
  finish(second, { inputTokens: 0, outputTokens: 10 });
  clock.ms = T0 + 60_300;
  // Trued up where it was charged: 400 + 10 used, so another 400 fits under 1 000. Trued up in the
  // minute before instead, the newer minute kept 800 and this one was refused.
  const third = call();
  t.equal(limiter.admit(third), undefined, 'a third estimate of 400 fits: the second was trued up to 10');
  finish(third, { inputTokens: 0, outputTokens: 400 });
});
