// A concurrency limit set by a later config counts the requests already in flight, admitted under
// the earlier one without a slot (no limit there, or a limit of the other scope): the first request
// admitted under the new limit adopts them, in memory and across replicas sharing the SQLite file,
// and their slots are freed when they end. Requests of keys without a concurrency limit never write
// to the store.
import t from 'tap';
import type { Test } from 'tap';
import type { AdmitOutcome, AdmitQuery, LimitStore, WindowChange } from '../../../edge-node/src/rate-limit/limit-store.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter, releaseConcurrencySlot } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { SqliteLimitStore } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { ManualClock, callContext, finish, quietLogger } from './limit-fixtures.js';
import type { CallOptions } from './limit-fixtures.js';

/** A store that counts the calls made to it. */
class CountingStore implements LimitStore {
  calls = 0;
  constructor(private readonly inner: LimitStore) {}
  admit(query: AdmitQuery): AdmitOutcome {
    this.calls += 1;
    return this.inner.admit(query);
  }
  change(changes: readonly WindowChange[]): void {
    this.calls += 1;
    this.inner.change(changes);
  }
  release(slotId: string): void {
    this.calls += 1;
    this.inner.release(slotId);
  }
  close(): void {
    this.inner.close();
  }
}

const stores: Array<{ name: string; open: (t: Test, clock: ManualClock) => LimitStore }> = [
  { name: 'memory', open: () => new MemoryLimitStore() },
  { name: 'sqlite', open: (tt, clock) => new SqliteLimitStore({ location: tt.testdir(), clock, heartbeatTimer: false }) },
];

for (const { name, open } of stores) {
  t.test(`with the ${name} store`, async (t) => {
    const setup = (tt: Test): { store: CountingStore; limiter: NodeRateLimiter; call: (opts?: CallOptions) => ReturnType<typeof callContext> } => {
      const clock = new ManualClock();
      const store = new CountingStore(open(tt, clock));
      const limiter = new NodeRateLimiter(store, quietLogger);
      tt.teardown(() => limiter.close());
      return { store, limiter, call: (opts) => callContext(clock, opts) };
    };

    t.test('a concurrency limit set while 4 requests of the key run without one counts them until they end', async (t) => {
      const { store, limiter, call } = setup(t);
      const running = [0, 1, 2, 3].map(() => call());
      for (const ctx of running) t.equal(limiter.admit(ctx), undefined, 'admitted without limits');
      const pushChannel = call();
      t.equal(limiter.admit(pushChannel), undefined);
      releaseConcurrencySlot(pushChannel);
      t.equal(store.calls, 0, 'requests of a key without limits never reach the store');

      const keyLimits = { concurrentRequests: 2 };
      const refused = call({ keyLimits });
      t.equal(limiter.admit(refused)?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'with 4 running and a limit of 2, a new request is refused');
      t.match(refused.responseHeaders, { 'retry-after': '1' });
      t.equal(limiter.admit(call({ keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'and so is the next');

      finish(running[0]!);
      finish(running[1]!);
      t.equal(limiter.admit(call({ keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', '2 still run: still full');
      finish(running[2]!);
      const admitted = call({ keyLimits });
      t.equal(limiter.admit(admitted), undefined, 'one runs: one more fits');
      t.equal(limiter.admit(call({ keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'and then it is full again');
      finish(running[3]!);
      finish(admitted);
      finish(pushChannel);
      const again = [call({ keyLimits }), call({ keyLimits })];
      for (const ctx of again) t.equal(limiter.admit(ctx), undefined, 'every slot is free once they all ended, the early-released one never counted');
    });

    t.test('a concurrency limit moved from the key to the account counts the requests the key runs', async (t) => {
      const { limiter, call } = setup(t);
      const before = [0, 1, 2].map(() => call({ keyId: 'k1', keyLimits: { concurrentRequests: 3 } }));
      for (const ctx of before) t.equal(limiter.admit(ctx), undefined, 'admitted under the key limit');
      const accountLimits = { concurrentRequests: 3 };
      t.equal(limiter.admit(call({ keyId: 'k2', accountLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', "another key of the account is refused: k1's 3 count");
      finish(before[0]!);
      const admitted = call({ keyId: 'k2', accountLimits });
      t.equal(limiter.admit(admitted), undefined, 'one ended: one fits');
      t.equal(limiter.admit(call({ keyId: 'k1', accountLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED');
      for (const ctx of [before[1]!, before[2]!, admitted]) finish(ctx);
      for (let i = 0; i < 3; i++) t.equal(limiter.admit(call({ keyId: 'k1', accountLimits })), undefined, `slot ${i + 1} free again`);
    });

    t.test('requests admitted under a rate limit alone count once a concurrency limit is set, also when that request is refused by its rate', async (t) => {
      const { limiter, call } = setup(t);
      const running = [call({ keyLimits: { requestsPerMinute: 3 } }), call({ keyLimits: { requestsPerMinute: 3 } })];
      for (const ctx of running) t.equal(limiter.admit(ctx), undefined);
      t.equal(limiter.admit(call({ keyLimits: { requestsPerMinute: 2, concurrentRequests: 2 } }))?.error.code, 'ZN_ERR_RATE_LIMITED', 'refused by requests per minute');
      t.equal(limiter.admit(call({ keyLimits: { concurrentRequests: 2 } }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'the two running were counted all the same');
      for (const ctx of running) finish(ctx);
      t.equal(limiter.admit(call({ keyLimits: { concurrentRequests: 2 } })), undefined);
    });
  });
}

t.test("a replica's requests admitted without a limit count on every replica once it admits one under the new limit", async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const replica = (): NodeRateLimiter => {
    const limiter = new NodeRateLimiter(new SqliteLimitStore({ location: dir, clock, heartbeatTimer: false }), quietLogger);
    t.teardown(() => limiter.close());
    return limiter;
  };
  const a = replica();
  const b = replica();
  const onA = [callContext(clock), callContext(clock)];
  for (const ctx of onA) t.equal(a.admit(ctx), undefined);
  const keyLimits = { concurrentRequests: 2 };
  t.equal(a.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', 'A counts its own 2');
  t.equal(b.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED', "B counts A's 2 through the shared file");
  finish(onA[0]!);
  const onB = callContext(clock, { keyLimits });
  t.equal(b.admit(onB), undefined, "one of A's ended: B runs one");
  t.equal(a.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED');
  finish(onA[1]!);
  finish(onB);
  for (const limiter of [a, b]) t.equal(limiter.admit(callContext(clock, { keyLimits })), undefined, 'all freed');
});
