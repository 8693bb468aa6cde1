// The wall clock stepping back across a minute boundary (NTP) neither resets nor hides the
// requests/min window: a minute older than the window's current one counts as the current one, so
// no count is lost and no extra requests get through. A large step (an hour) holds nobody out for
// longer than a normal window, and its counts do not come back when the clock catches up. Both stores.
// A step of more than a minute (into the minute two before) keeps the counts too, also those another
// replica wrote after it. A token true-up after a step back changes the counts its estimate went into.
import t from 'tap';
import type { Test } from 'tap';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import type { LimitStore } from '../../../edge-node/src/rate-limit/limit-store.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { SqliteLimitStore } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { ManualClock, T0, callContext, finish, quietLogger, sqliteReplica } from './limit-fixtures.js';

const stores: Array<[string, (dir: string, clock: ManualClock) => LimitStore]> = [
  ['memory', () => new MemoryLimitStore()],
  ['sqlite', (dir, clock) => new SqliteLimitStore({ location: dir, clock, heartbeatTimer: false })],
];

/** A limiter of 10 000 tokens/min per key, 5 s into the minute two after T0, and a call of given estimates. */
function tokenLimiter(t: Test, makeStore: (dir: string, clock: ManualClock) => LimitStore) {
  const clock = new ManualClock(T0 + 2 * 60_000 + 5_000);
  const limiter = new NodeRateLimiter(makeStore(t.testdir(), clock), quietLogger);
  t.teardown(() => limiter.close());
  const keyLimits = { tokensPerMinute: 10_000 };
  const call = (estimatedInputTokens: number, maxOutputTokens: number): PipelineContext => callContext(clock, { keyLimits, estimatedInputTokens, maxOutputTokens });
  return { clock, limiter, call };
}

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
  t.test(`${name}: a clock that steps back 70 s, into the minute two before, keeps the requests already counted`, async (t) => {
    const clock = new ManualClock(T0 + 2 * 60_000 + 5_000);
    const limiter = new NodeRateLimiter(makeStore(t.testdir(), clock), quietLogger);
    t.teardown(() => limiter.close());
    const keyLimits = { requestsPerMinute: 10 };
    const admitted = (): boolean => {
      const ctx = callContext(clock, { keyLimits });
      const ok = limiter.admit(ctx) === undefined;
      finish(ctx);
      return ok;
    };
    for (let i = 0; i < 10; i++) t.ok(admitted(), `request ${i + 1} of 10 admitted`);
    clock.ms -= 70_000;
    for (let i = 0; i < 3; i++) t.notOk(admitted(), 'refused after the step back: the 10 still count');
    clock.ms = T0 + 3 * 60_000;
    t.ok(admitted(), 'admitted once a window has passed');
  });

  t.test(`${name}: a token true-up after a clock step back of 70 s gives back what was not used, and keeps what was`, async (t) => {
    const { clock, limiter, call } = tokenLimiter(t, makeStore);
    const long = call(1_000, 8_000);
    t.equal(limiter.admit(long), undefined, '9 000 charged');
    clock.ms -= 70_000; // while the request runs
    const short = call(10, 10);
    t.equal(limiter.admit(short), undefined, 'a request of 20 fits beside the 9 000');
    finish(short, { inputTokens: 10, outputTokens: 10 });
    finish(long, { inputTokens: 1_000, outputTokens: 5 });
    // 1 025 used. A lost true-up left the 9 000 counted, and this was refused.
    const next = call(100, 4_000);
    t.equal(limiter.admit(next), undefined, 'an estimate of 4 100 fits beside the 1 025 used');
    // Counts lost in the step would let this in.
    t.equal(limiter.admit(call(0, 5_000))?.error.code, 'ZN_ERR_RATE_LIMITED', 'an estimate of 5 000 does not fit beside 5 125');
    finish(next);
  });
}

for (const [name, makeStore] of stores) {
  t.test(`${name}: a request that used more than its estimate, ending after a clock step back of 70 s, adds the rest without dropping the other counts`, async (t) => {
    const { clock, limiter, call } = tokenLimiter(t, makeStore);
    const long = call(100, 6_000);
    t.equal(limiter.admit(long), undefined, '6 100 charged, still running');
    const short = call(10, 90);
    t.equal(limiter.admit(short), undefined, '100 charged');
    clock.ms -= 70_000;
    const other = call(10, 90);
    t.equal(limiter.admit(other), undefined, '100 more, after the step back');
    finish(short, { inputTokens: 10, outputTokens: 1_990 }); // 2 000 used: 1 900 more than estimated
    // 6 100 + 2 000 + 100 counted. Added at the admission minute, ahead of the clock, the 1 900
    // moved the memory store's window forward and emptied it, and this was let in.
    t.equal(limiter.admit(call(0, 3_000))?.error.code, 'ZN_ERR_RATE_LIMITED', 'an estimate of 3 000 does not fit beside 8 200');
    t.equal(limiter.admit(call(0, 1_500)), undefined, 'one of 1 500 does');
    finish(other);
    finish(long);
  });
}

t.test("sqlite: a replica idle since before a step back of 70 s still counts what the others admitted, and theirs what it admitted since", async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock(T0 + 5_000);
  const idle = sqliteReplica(t, dir, clock); // its last beat: minute 0
  const busy = sqliteReplica(t, dir, clock);
  const keyLimits = { requestsPerMinute: 10 };
  const admitted = (limiter: NodeRateLimiter): boolean => {
    const ctx = callContext(clock, { keyLimits });
    const ok = limiter.admit(ctx) === undefined;
    finish(ctx);
    return ok;
  };
  clock.advance(2 * 60_000); // minute 2
  busy.store.heartbeat();
  for (let i = 0; i < 6; i++) t.ok(admitted(busy.limiter), `busy replica: request ${i + 1} admitted`);
  clock.ms -= 70_000; // minute 0 again
  // The idle replica saw no minute later than 0, so it does not know of the step: it reads only
  // minutes -1 to 1 and admits up to the limit (until a beat or another replica moves the counts back).
  for (let i = 0; i < 4; i++) t.ok(admitted(idle.limiter), `idle replica: request ${i + 1} admitted`);
  // The busy replica's admit moves its six back onto minute 0, added to the idle replica's four.
  t.notOk(admitted(busy.limiter), 'busy replica refused: 6 + 4 counted');
  t.notOk(admitted(idle.limiter), 'idle replica refused too');
});

t.test("sqlite: a replica whose last beat was in the minute before a step back of 70 s sees it at its first admit", async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock(T0 + 2 * 60_000 + 5_000);
  const a = sqliteReplica(t, dir, clock);
  const b = sqliteReplica(t, dir, clock); // beat at minute 2, admitted nothing
  const keyLimits = { requestsPerMinute: 5 };
  for (let i = 0; i < 5; i++) {
    const ctx = callContext(clock, { keyLimits });
    t.equal(a.limiter.admit(ctx), undefined, `replica A: request ${i + 1} admitted`);
    finish(ctx);
  }
  clock.ms -= 70_000;
  const ctx = callContext(clock, { keyLimits });
  t.equal(b.limiter.admit(ctx)?.error.code, 'ZN_ERR_RATE_LIMITED', "replica B's first admit after the step counts A's five");
  finish(ctx);
});

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
    // Both stores keep the five, as this minute's: no caller waits for the hour.
    t.notOk(refused.ok, 'refused: the five still count');
    t.ok(refused.retryAfter !== undefined && refused.retryAfter <= 120, `Retry-After ${refused.retryAfter} s: within a window`);
    clock.ms = T0 + 3 * 60_000;
    t.ok(attempt().ok, 'admitted three minutes later, not an hour');
    clock.ms = T0 + 3_599_000; // the clock catches up with the minute the five were counted in
    for (let i = 0; i < 5; i++) t.ok(attempt().ok, `request ${i + 1} of 5 admitted: the hour-old counts do not come back`);
  });
}

for (const [name, makeStore] of stores) t.test(`${name}: after a step back across a minute boundary, a token true-up changes the counts the estimate went into`, async (t) => {
  const clock = new ManualClock();
  const limiter = new NodeRateLimiter(makeStore(t.testdir(), clock), quietLogger);
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

