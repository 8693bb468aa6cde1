import t from 'tap';
import { waitFor } from '../fixtures/wait-for.js';

t.test('waitFor resolves with the first truthy value the probe returns', async (t) => {
  let calls = 0;
  const value = await waitFor(() => (++calls >= 3 ? { calls } : undefined), { what: 'the third call', intervalMs: 1 });
  t.same(value, { calls: 3 });
});

t.test('waitFor keeps polling through probes that throw and resolve async', async (t) => {
  let calls = 0;
  const value = await waitFor(async () => {
    calls++;
    if (calls < 3) throw new Error('not yet');
    return 'ready';
  }, { what: 'readiness', intervalMs: 1 });
  t.equal(value, 'ready');
});

t.test('waitFor times out naming what it waited for and the last error', async (t) => {
  await t.rejects(
    waitFor(() => false, { what: 'the moon to turn blue', timeoutMs: 50, intervalMs: 5 }),
    { message: /^timed out after 50ms waiting for the moon to turn blue$/ },
  );
  await t.rejects(
    waitFor(() => { throw new Error('connection refused'); }, { what: 'a server', timeoutMs: 50, intervalMs: 5 }),
    { message: /timed out after 50ms waiting for a server.*connection refused/ },
  );
});
