// Property tests of one node credit lease under interleaved requests (fast-check's scheduler
// decides the interleaving): the lease never holds more than it was granted, and every micro-unit
// reserved ends up either spent or released, exactly.
import fc from 'fast-check';
import t from 'tap';
import { CreditLease } from '../../../edge-node/src/billing/credit-lease.js';
import type { Reservation } from '../../../edge-node/src/billing/credit-lease.js';

const NOW = 1_000_000;

interface Request {
  amount: number;
  /** 'settle' with actual = floor(amount × ratio / 100); 'release' gives it all back. */
  end: 'settle' | 'release';
  ratio: number;
}

const requestArb: fc.Arbitrary<Request> = fc.record({
  amount: fc.integer({ min: 0, max: 5_000 }),
  end: fc.constantFrom('settle' as const, 'release' as const),
  ratio: fc.integer({ min: 0, max: 100 }),
});

function checkBalanced(lease: CreditLease, granted: number): void {
  if (lease.spent + lease.reserved + lease.available !== granted) {
    throw new Error(`spent ${lease.spent} + reserved ${lease.reserved} + available ${lease.available} != granted ${granted}`);
  }
  if (lease.reserved < 0 || lease.spent < 0) throw new Error('negative reserved or spent');
  if (lease.reserved + lease.spent > granted) throw new Error(`reserved ${lease.reserved} + spent ${lease.spent} exceed granted ${granted}`);
}

t.test('concurrent reserve/settle/release sequences never overdraw the lease and add up exactly', async (t) => {
  await fc.assert(
    fc.asyncProperty(
      fc.scheduler(),
      fc.integer({ min: 0, max: 20_000 }),
      fc.array(requestArb, { minLength: 1, maxLength: 40 }),
      fc.array(fc.integer({ min: 0, max: 10_000 }), { maxLength: 4 }),
      async (s, initialGrant, requests, topUps) => {
        let granted = initialGrant;
        const lease = new CreditLease({ accountId: 'acct', leaseId: 'lease-1', granted, spent: 0, expiresAt: NOW + 1, state: 'open' });
        let expectedSpent = 0;
        let released = 0;
        let refused = 0;
        let reservedTotal = 0;

        const requestTasks = requests.map(async (req, i) => {
          // Each request is an async task; the scheduler interleaves their steps.
          const reservation: Reservation | undefined = await s.schedule(Promise.resolve(lease.reserve(req.amount, NOW, `req-${i}`)));
          checkBalanced(lease, granted);
          if (reservation === undefined) {
            refused += 1;
            return;
          }
          reservedTotal += req.amount;
          await s.schedule(Promise.resolve());
          if (req.end === 'settle') {
            const actual = Math.floor((req.amount * req.ratio) / 100);
            lease.settle(reservation, actual);
            expectedSpent += actual;
            released += req.amount - actual;
          } else {
            lease.release(reservation);
            released += req.amount;
          }
          checkBalanced(lease, granted);
        });
        const grantTasks = topUps.map(async (extra) => {
          await s.schedule(Promise.resolve());
          granted += extra;
          lease.grant(granted, NOW + 1);
          checkBalanced(lease, granted);
        });
        await s.waitFor(Promise.all([...requestTasks, ...grantTasks]));

        if (lease.reserved !== 0) throw new Error(`reserved ${lease.reserved} after every request ended`);
        if (lease.spent !== expectedSpent) throw new Error(`spent ${lease.spent} != settled ${expectedSpent}`);
        if (expectedSpent + released !== reservedTotal) throw new Error('settlements + releases != reservations');
        if (lease.available !== granted - expectedSpent) throw new Error('available != granted - spent');
        void refused;
      },
    ),
    { numRuns: 300 },
  );
  t.pass('300 interleavings checked');
});

t.test('a reservation larger than what is available is refused and holds nothing', (t) => {
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 1_000_000 }), fc.integer({ min: 0, max: 1_000_000 }), (granted, held) => {
      const lease = new CreditLease({ accountId: 'a', leaseId: 'l', granted, spent: 0, expiresAt: NOW + 1, state: 'open' });
      const first = lease.reserve(Math.min(held, granted), NOW, 'req-1');
      if (first === undefined) throw new Error('a reservation within the grant was refused');
      const tooMuch = lease.available + 1;
      if (lease.reserve(tooMuch, NOW, 'req-2') !== undefined) throw new Error('reserved more than available');
      if (lease.reserved !== Math.min(held, granted)) throw new Error('a refused reservation changed reserved');
      if (lease.reserve(lease.available, NOW, 'req-3') === undefined) throw new Error('exactly the available amount was refused');
      if (lease.available !== 0) throw new Error('available should be 0');
    }),
  );
  t.pass();
  t.end();
});

t.test('a settled or released reservation cannot be ended twice', async (t) => {
  const lease = new CreditLease({ accountId: 'a', leaseId: 'l', granted: 100, spent: 0, expiresAt: NOW + 1, state: 'open' });
  const r = lease.reserve(60, NOW, 'req-1')!;
  lease.settle(r, 10);
  t.throws(() => lease.settle(r, 10), /already settled or released/);
  t.throws(() => lease.release(r), /already settled or released/);
  t.equal(lease.spent, 10);
  t.equal(lease.available, 90);
});

t.test('a repeated or older grant neither adds twice nor shrinks the lease', async (t) => {
  const lease = new CreditLease({ accountId: 'a', leaseId: 'l', granted: 0, spent: 0, expiresAt: 0, state: 'open' });
  lease.grant(500, NOW + 10);
  lease.grant(500, NOW + 10);
  lease.grant(300, NOW + 10);
  t.equal(lease.granted, 500);
  t.equal(lease.available, 500);
});

t.test('an expired or returned lease refuses every reservation', async (t) => {
  const expired = new CreditLease({ accountId: 'a', leaseId: 'l', granted: 100, spent: 0, expiresAt: NOW, state: 'open' });
  t.equal(expired.reserve(1, NOW, 'req-1'), undefined);
  const open = new CreditLease({ accountId: 'a', leaseId: 'l2', granted: 100, spent: 0, expiresAt: NOW + 1, state: 'open' });
  const held = open.reserve(30, NOW, 'req-2')!;
  t.equal(open.markReturned(), 70, 'hands back granted − spent − reserved');
  t.equal(open.reserve(1, NOW, 'req-3'), undefined);
  open.grant(1_000, NOW + 100);
  t.equal(open.granted, 100, 'grants are ignored once returned');
  open.settle(held, 30);
  t.equal(open.spent, 30);
});

t.test('a lease restored after a crash counts what was reserved as spent', async (t) => {
  const restored = new CreditLease({ accountId: 'a', leaseId: 'l', granted: 100, spent: 20, reserved: 30, expiresAt: NOW + 1, state: 'open' });
  t.equal(restored.spent, 50);
  t.equal(restored.reserved, 0);
  t.equal(restored.available, 50);
});
