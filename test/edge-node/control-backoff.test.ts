// Reconnect back-off (exponential, full jitter, capped, reset after a healthy session) and the
// five-minute request window the heartbeat figures come from.
import t from 'tap';
import { Backoff } from '../../edge-node/src/control/backoff.js';
import { RequestWindow } from '../../edge-node/src/metrics/request-window.js';

t.test('back-off steps double up to the cap, each delay is a random share of its step, and reset starts over', async (t) => {
  const top = new Backoff({ baseMs: 100, maxMs: 1000, random: () => 0.999999 });
  t.same([1, 2, 3, 4, 5, 6].map(() => top.next()), [99, 199, 399, 799, 999, 999], 'doubling, then capped');
  const bottom = new Backoff({ baseMs: 100, maxMs: 1000, random: () => 0 });
  t.same([bottom.next(), bottom.next()], [0, 0], 'full jitter reaches down to zero');
  const half = new Backoff({ baseMs: 100, maxMs: 1000, random: () => 0.5 });
  half.next();
  half.next();
  t.equal(half.next(), 200, 'the third step is 400 ms, half of it drawn');
  half.reset();
  t.equal(half.attempts, 0);
  t.equal(half.next(), 50, 'after a reset the first step again');
  t.throws(() => new Backoff({ baseMs: 0, maxMs: 10 }));
  t.throws(() => new Backoff({ baseMs: 10, maxMs: 5 }));
});

t.test('the request window counts requests and server errors of the last five minutes only', async (t) => {
  let now = 1_700_000_000_000;
  const window = new RequestWindow(() => now);
  window.record(false);
  window.record(true);
  now += 120_000;
  window.record(false);
  t.same(window.figures(), { requests: 3, errors: 1 });
  now += 200_000; // the first two are now 320 s old
  t.same(window.figures(), { requests: 1, errors: 0 });
  now += 300_000;
  t.same(window.figures(), { requests: 0, errors: 0 });
  // A slot reused by a later second starts from zero.
  window.record(true);
  t.same(window.figures(), { requests: 1, errors: 1 });
});
