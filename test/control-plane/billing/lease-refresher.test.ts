// One session's lease refresh: wakes coalesce, a wake during a refresh runs it once more, an
// interval tick during one is skipped, woken ones start at most once a second, and nothing runs
// after stop.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { LeaseRefresher, WAKE_COALESCE_MS, WAKE_MIN_GAP_MS } from '../../../control-plane/src/billing/lease-refresher.js';
import { waitFor } from '../../fixtures/wait-for.js';

/** A refresh whose runs are counted and each held open until released. */
function gatedRefresh(): { refresh: () => Promise<void>; runs: () => number; running: () => boolean; release: () => void } {
  let runs = 0;
  let open: (() => void) | undefined;
  return {
    refresh: () => {
      runs += 1;
      return new Promise<void>((resolve) => {
        open = resolve;
      });
    },
    runs: () => runs,
    running: () => open !== undefined,
    release: () => {
      const resolve = open;
      open = undefined;
      resolve?.();
    },
  };
}

function refresher(t: { teardown(fn: () => void): void }, refresh: () => Promise<void>, intervalMs = 3_600_000): LeaseRefresher {
  const errors: unknown[] = [];
  const r = new LeaseRefresher(refresh, intervalMs, (err) => errors.push(err));
  t.teardown(() => r.stop());
  return r;
}

t.test('wakes in a burst cost one refresh', async (t) => {
  const gate = gatedRefresh();
  const r = refresher(t, gate.refresh);
  r.firstDone();
  for (let i = 0; i < 20; i++) r.wake();
  await waitFor(() => gate.runs() === 1, { what: 'the woken refresh' });
  gate.release();
  // Well past the coalescing window: no second run came of the burst.
  await sleep(WAKE_COALESCE_MS * 3);
  t.equal(gate.runs(), 1);
});

t.test('a wake while a refresh runs (the first grant included) runs it once more afterwards', async (t) => {
  const gate = gatedRefresh();
  const r = refresher(t, gate.refresh);
  // The first grant is still under way: the wake must not be lost.
  r.wake();
  await sleep(WAKE_COALESCE_MS * 2);
  t.equal(gate.runs(), 0, 'nothing runs beside the first grant');
  r.firstDone();
  await waitFor(() => gate.runs() === 1, { what: 'the refresh owed to the wake' });
  r.wake();
  r.wake();
  await sleep(WAKE_COALESCE_MS * 2);
  t.equal(gate.runs(), 1, 'never two at once');
  gate.release();
  await waitFor(() => gate.runs() === 2, { what: 'one more refresh for the wakes during the first' });
  gate.release();
  await sleep(WAKE_COALESCE_MS * 2);
  t.equal(gate.runs(), 2);
});

t.test('an interval tick during a refresh is skipped, not queued', async (t) => {
  const gate = gatedRefresh();
  const r = refresher(t, gate.refresh, 100);
  r.firstDone();
  await waitFor(() => gate.runs() === 1, { what: 'the first interval refresh' });
  // Several ticks pass while it runs.
  await sleep(450);
  t.equal(gate.runs(), 1);
  gate.release();
  await waitFor(() => gate.runs() === 2, { what: 'the next tick after it ended' });
  t.ok(gate.running());
  gate.release();
});

t.test('nothing runs after stop, and a failed refresh is reported', async (t) => {
  const errors: unknown[] = [];
  let runs = 0;
  const r = new LeaseRefresher(async () => {
    runs += 1;
    throw new Error('database away');
  }, 3_600_000, (err) => errors.push(err));
  t.teardown(() => r.stop());
  r.firstDone();
  r.wake();
  await waitFor(() => errors.length === 1, { what: 'the failure reported' });
  t.match(errors[0], { message: 'database away' });
  r.wake();
  r.stop();
  await sleep(WAKE_COALESCE_MS * 2);
  t.equal(runs, 1);
});

t.test('wakes spread over seconds start a refresh at most once per WAKE_MIN_GAP_MS', async (t) => {
  const gate = gatedRefresh();
  const r = refresher(t, gate.refresh);
  r.firstDone();
  // An admin script: a change every 120 ms for 2.5 s, each refresh quick.
  const until = Date.now() + 2_500;
  while (Date.now() < until) {
    r.wake();
    gate.release();
    await sleep(120);
  }
  gate.release();
  // A busy machine only delays timers, so fewer runs, never more: at most one per gap, plus the
  // one the window may start with.
  t.ok(gate.runs() <= Math.ceil(2_500 / WAKE_MIN_GAP_MS) + 1, `${gate.runs()} refreshes in 2.5 s`);
  t.ok(gate.runs() >= 1, 'the wakes were not lost');
});
