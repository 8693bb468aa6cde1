/** The per-IP fixed-window limiter behind enrollment, driven by explicit clock values. */
import t from 'tap';
import { FixedWindowRateLimiter } from '../../control-plane/src/nodes/enroll-rate-limit.js';

t.test('a client gets `limit` attempts per window, then a Retry-After until the window ends', async (t) => {
  const limiter = new FixedWindowRateLimiter({ limit: 2, windowMs: 60_000 });
  t.same(limiter.hit('a', 1_000), { allowed: true });
  t.same(limiter.hit('a', 2_000), { allowed: true });
  t.same(limiter.hit('a', 30_500), { allowed: false, retryAfterSeconds: 31 });
  t.same(limiter.hit('a', 60_999), { allowed: false, retryAfterSeconds: 1 }, 'never less than one second');
  t.same(limiter.hit('b', 30_000), { allowed: true }, 'another client has its own budget');
  t.same(limiter.hit('a', 61_000), { allowed: true }, 'a new window starts fresh');
});

t.test('the number of remembered clients is bounded; finished windows go first', async (t) => {
  const limiter = new FixedWindowRateLimiter({ limit: 1, windowMs: 1_000, maxKeys: 3 });
  limiter.hit('old', 0);
  limiter.hit('x', 5_000);
  t.same(limiter.hit('x', 5_001), { allowed: false, retryAfterSeconds: 1 });
  limiter.hit('y', 5_002);
  limiter.hit('z', 5_003); // full: 'old' (finished) is dropped, 'x' keeps its count
  t.same(limiter.hit('x', 5_004), { allowed: false, retryAfterSeconds: 1 }, 'a running window survived the sweep');
  limiter.hit('w', 5_005); // full again, nothing finished: the oldest running window ('x') goes
  t.same(limiter.hit('x', 5_006), { allowed: true }, 'the evicted client merely starts a fresh window');
});
