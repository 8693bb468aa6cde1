// Replicas on one state dir share credit-leases.sqlite, each with the lease book it loaded at start.
// What they reserve and spend is written onto the lease as stored and checked against it, so they
// cannot both spend what is left of a lease, every replica's charges count on disk, a replica takes
// a lease or top-up the control link's holder was granted after it started, and a lease one replica
// returned is not served from by another (nor reopened on disk).
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import type { Test } from 'tap';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import type { LeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';

const NOW = Date.now();

/** Two replicas' books on one state dir (separate SQLite connections, as separate processes have). */
function twoReplicas(t: Test): { dir: string; open: (owner: number) => { store: LeaseStore; book: LeaseBook } } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-lease-replicas-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return {
    dir,
    open: (owner) => {
      const store = openLeaseStore(dir, { nodeId: 'n1', owner });
      t.teardown(() => store.close());
      return { store, book: new LeaseBook(store) };
    },
  };
}

function storedLease(dir: string, leaseId: string): ReturnType<LeaseStore['load']>[number] | undefined {
  const store = openLeaseStore(dir, { nodeId: 'n1' });
  try {
    return store.load().find((l) => l.leaseId === leaseId);
  } finally {
    store.close();
  }
}

t.test('two replicas cannot both spend what is left of a lease, and both their charges count on disk', async (t) => {
  const { dir, open } = twoReplicas(t);
  const a = open(1);
  a.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 100, expiresAt: NOW + 60_000 });
  const b = open(2);
  const leaseA = a.book.leaseOf('acct-1')!;
  const leaseB = b.book.leaseOf('acct-1')!;
  t.equal(leaseB.available, 100, 'B loaded the lease with 100 left');

  leaseA.settle(leaseA.reserve(80, NOW, 'req-a')!, 80);
  t.equal(leaseB.reserve(80, NOW, 'req-b'), undefined, 'B cannot reserve the 80 A already spent');
  t.equal(leaseB.available, 20, 'and now knows what is left');
  leaseB.settle(leaseB.reserve(20, NOW, 'req-b2')!, 15);
  t.match(storedLease(dir, 'lease-1'), { granted: 100, spent: 95, reserved: 0 }, "both replicas' charges are on disk");
  t.equal(leaseA.reserve(10, NOW, 'req-a2'), undefined, 'A cannot spend past the 5 left either');
});

t.test("a replica serves from a lease and a top-up the control link's holder was granted after it started", async (t) => {
  const { open } = twoReplicas(t);
  const a = open(1);
  a.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 100, expiresAt: NOW + 60_000 });
  const b = open(2);
  const creditB = new LeaseCredit(b.book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' }));
  const request = (): PipelineContext => ({
    requestId: `req-${Math.random()}`,
    api: 'embeddings',
    model: 'm',
    maxOutputTokens: null,
    estimatedInputTokens: 1,
    config: { prices: new Map([['m', { model: 'm', inputMicrosPerToken: 100, outputMicrosPerToken: 0, requestMicros: 0 }]]), toolServers: new Map() },
    key: { id: 'key-1', accountId: 'acct-1' },
    clock: { now: () => NOW, monotonic: () => 0 },
    attempts: [],
    usage: { inputTokens: 0, outputTokens: 0, estimated: false },
    cost: { reservedMicros: 0, costMicros: 0, leaseId: null, priced: false },
    cleanups: [],
  }) as unknown as PipelineContext;

  const first = request();
  t.equal(creditB.preauthorise(first), undefined, 'B reserves from the lease it loaded');
  t.match(creditB.preauthorise(request()), { error: { code: 'ZN_ERR_CREDIT_EXHAUSTED' } }, 'which the first request holds whole');
  // The holder is topped up: B reserves from the raised total without a grant of its own.
  a.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 200, expiresAt: NOW + 60_000 });
  const second = request();
  t.equal(creditB.preauthorise(second), undefined, "B takes the holder's top-up");
  t.equal(second.cost.leaseId, 'lease-1');
  // The holder is granted a new lease for the account (the old one returned).
  a.book.markReturned(a.book.leaseOf('acct-1')!);
  a.book.grant({ accountId: 'acct-1', leaseId: 'lease-2', amountMicros: 500, expiresAt: NOW + 60_000 });
  const third = request();
  t.equal(creditB.preauthorise(third), undefined, "B takes the holder's new lease");
  t.equal(third.cost.leaseId, 'lease-2');
  for (const cleanup of [...first.cleanups, ...second.cleanups, ...third.cleanups]) cleanup();
});

t.test('a lease one replica returned is not served from by another, stays returned on disk, and a restart does not serve from it', async (t) => {
  const { dir, open } = twoReplicas(t);
  const a = open(1);
  a.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000, expiresAt: NOW + 60_000 });
  const b = open(2);
  const leaseB = b.book.leaseOf('acct-1')!;
  const held = leaseB.reserve(100, NOW, 'req-b')!;

  // A (the control link's holder) returns the lease at its stop; B's request in flight settles after.
  t.equal(a.book.markReturned(a.book.leaseOf('acct-1')!), 900, "A hands back what is neither spent nor held by B's request");
  leaseB.settle(held, 40);
  t.equal(leaseB.state, 'returned', 'B takes the return on with its write');
  t.equal(leaseB.reserve(1, NOW, 'req-b2'), undefined, 'and reserves nothing more from it');
  t.equal(b.book.leaseOf('acct-1'), undefined);
  t.same(b.book.openLeases(), [], 'nor reports it as open');

  t.match(storedLease(dir, 'lease-1'), { state: 'returned', spent: 40, reserved: 0 });
  const restarted = open(3).book;
  t.equal(restarted.leaseOf('acct-1'), undefined, 'a restarted replica has no open lease to serve from');
});

t.test('at start, a reserved amount no row explains (an older release wrote it) moves to spent on disk, and a live replica\'s stays reserved', async (t) => {
  const { dir, open } = twoReplicas(t);
  const live = open(2);
  live.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000, expiresAt: NOW + 60_000 });
  const held = live.book.leaseOf('acct-1')!.reserve(50, NOW, 'live-req')!;
  // What an older release left: 100 more reserved, with no row.
  const raw = openLeaseStore(dir, { nodeId: 'n1' });
  const before = raw.load()[0]!;
  raw.save({ ...before, reserved: before.reserved + 100 }, before);
  raw.close();
  const evidence = { owner: 3, ownerGone: (slot: number) => slot !== 2, holdsRequest: () => false, finalCost: () => undefined };
  const store = openLeaseStore(dir, { nodeId: 'n1', owner: 3 });
  t.teardown(() => store.close());
  new LeaseBook(store, { evidence });
  t.match(storedLease(dir, 'lease-1'), { spent: 100, reserved: 50 }, 'the unexplained 100 is spent; the live 50 stays reserved');
  live.book.leaseOf('acct-1')!.settle(held, 20);
  t.match(storedLease(dir, 'lease-1'), { spent: 120, reserved: 0 });
});

t.test("a grant of a lease another replica returned is answered as already returned, so the return is sent again", async (t) => {
  const { open } = twoReplicas(t);
  const a = open(1);
  a.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000, expiresAt: NOW + 60_000 });
  const b = open(2);
  a.book.markReturned(a.book.leaseOf('acct-1')!);
  t.equal(b.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000, expiresAt: NOW + 120_000 }), 'already-returned');
});

t.test('a grant of a lease another replica was granted and returned, all before this replica knew of it, is answered as already returned too', async (t) => {
  const { dir, open } = twoReplicas(t);
  // B started first and never served the account: the lease is new to it when the grant comes.
  const b = open(2);
  const a = open(1);
  a.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000, expiresAt: NOW + 60_000 });
  const reservation = a.book.leaseOf('acct-1')!.reserve(300, NOW, 'req-1');
  t.ok(reservation, 'A reserves 300');
  a.book.leaseOf('acct-1')!.settle(reservation!, 300);
  t.equal(a.book.markReturned(a.book.leaseOf('acct-1')!), 700, 'A hands back 700 (the return is lost)');
  // B now holds the control link; the control plane, still counting the lease open, grants it again.
  t.equal(b.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000, expiresAt: NOW + 120_000 }), 'already-returned', 'so the return is sent again');
  t.equal(b.book.leaseOf('acct-1'), undefined, 'and B does not serve from it');
  t.match(storedLease(dir, 'lease-1'), { state: 'returned', spent: 300 }, 'it stays returned on disk, with what A spent');
});
