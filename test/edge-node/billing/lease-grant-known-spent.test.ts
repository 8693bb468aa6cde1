// A LeaseGrant carries the spend the control plane knows of the lease (known_spent_micros): the node
// counts at least that much spent, written with the grant in credit-leases.sqlite, so a lease book
// that went back (lost, restored from an older copy, or a node re-enrolled on another host) cannot
// spend again what was already spent. A book that is intact counts at least that much already —
// with its finished requests whose charge is still to come — and is left as it is.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import type { Test } from 'tap';
import type { ControlMessage } from '../../../proto/src/index.js';
import { CreditChannel } from '../../../edge-node/src/billing/credit-channel.js';
import { CreditLease } from '../../../edge-node/src/billing/credit-lease.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import type { LeaseStore } from '../../../edge-node/src/billing/lease-store.js';

const NOW = Date.now();
const EXPIRES = NOW + 60_000;
const logger = pino({ level: 'silent' });

function stateDir(t: Test): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-lease-known-spent-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** One replica's store and book on `dir` (its own SQLite connection, as a process has). */
function openBook(t: Test, dir: string, owner = 1): { store: LeaseStore; book: LeaseBook } {
  const store = openLeaseStore(dir, { nodeId: 'n1', owner });
  t.teardown(() => store.close());
  return { store, book: new LeaseBook(store) };
}

function storedLease(dir: string, leaseId: string): ReturnType<LeaseStore['load']>[number] | undefined {
  const store = openLeaseStore(dir, { nodeId: 'n1' });
  try {
    return store.load().find((l) => l.leaseId === leaseId);
  } finally {
    store.close();
  }
}

t.test('a grant of a lease the book does not know starts it from the known spend, on disk, and limits what can be reserved', async (t) => {
  const dir = stateDir(t);
  const { book } = openBook(t, dir);
  // The control plane granted 1 000 and knows 700 of it spent (the node's book was lost since).
  book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000, expiresAt: EXPIRES, knownSpentMicros: 700 });
  const lease = book.leaseOf('acct-1')!;
  t.equal(lease.spent, 700, 'the lease counts the known spend');
  t.equal(lease.available, 300);
  t.equal(lease.reserve(301, NOW, 'req-too-much'), undefined, 'more than granted − known spend cannot be reserved');
  const r = lease.reserve(300, NOW, 'req-1');
  t.ok(r, 'what is left can');
  t.match(storedLease(dir, 'lease-1'), { granted: 1_000, spent: 700, reserved: 300 }, 'the known spend is on disk with the grant');
  // Another replica (or a restart) serves from the same figures.
  const other = openBook(t, dir, 2).book;
  t.equal(other.leaseOf('acct-1')!.reserve(1, NOW, 'req-other'), undefined, 'another replica cannot spend it again either');
});

t.test('a grant with a known spend above what an intact book counts raises spent to it, with reservations unchanged', async (t) => {
  const dir = stateDir(t);
  const { book } = openBook(t, dir);
  book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000, expiresAt: EXPIRES });
  const lease = book.leaseOf('acct-1')!;
  lease.settle(lease.reserve(100, NOW, 'req-1')!, 100);
  const held = lease.reserve(50, NOW, 'req-2')!;
  // The book was restored from an older copy: the control plane knows of 600 spent. The grant is a
  // repeat (same total and expiry), which changes the spent figure only.
  book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000, expiresAt: EXPIRES, knownSpentMicros: 600 });
  t.equal(lease.spent, 600);
  t.equal(lease.reserved, 50, 'what in-flight requests hold is unchanged');
  t.match(storedLease(dir, 'lease-1'), { granted: 1_000, spent: 600, reserved: 50 }, 'written with the grant');
  t.equal(lease.reserve(351, NOW, 'req-3'), undefined, 'only granted − known spend − reserved is left');
  lease.settle(held, 40);
  t.match(storedLease(dir, 'lease-1'), { spent: 640, reserved: 0 }, 'the request in flight is charged as before');
});

t.test('a grant never lowers spent', async (t) => {
  const dir = stateDir(t);
  const { book } = openBook(t, dir);
  book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000, expiresAt: EXPIRES });
  const lease = book.leaseOf('acct-1')!;
  lease.settle(lease.reserve(500, NOW, 'req-1')!, 500);
  book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 2_000, expiresAt: EXPIRES, knownSpentMicros: 200 });
  t.equal(lease.spent, 500, 'a lower known spend leaves spent as it is');
  t.equal(lease.granted, 2_000, 'the top-up is taken');
  t.match(storedLease(dir, 'lease-1'), { granted: 2_000, spent: 500 });
  book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 2_000, expiresAt: EXPIRES, knownSpentMicros: 0 });
  t.match(storedLease(dir, 'lease-1'), { spent: 500 }, 'nor does a grant of an older control plane (0)');

  // A lease kept by no store (a stand-alone lease) takes the known spend too, and never lowers it.
  const alone = new CreditLease({ accountId: 'acct-2', leaseId: 'lease-2', granted: 1_000, spent: 300, expiresAt: EXPIRES, state: 'open' });
  alone.grant(1_000, EXPIRES, 100);
  t.equal(alone.spent, 300);
  alone.grant(1_000, EXPIRES, 800);
  t.equal(alone.spent, 800);
});

t.test('an intact book is left as it is: finished requests whose charge is still to come count in its spend, whichever replica finished them', async (t) => {
  const dir = stateDir(t);
  const a = openBook(t, dir, 1);
  a.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000, expiresAt: EXPIRES });
  const b = openBook(t, dir, 2);
  const leaseA = a.book.leaseOf('acct-1')!;
  const leaseB = b.book.leaseOf('acct-1')!;
  leaseA.settle(leaseA.reserve(100, NOW, 'req-charged')!, 100);
  // Finished, their records being written, not charged yet: one in each replica.
  const finishingA = leaseA.reserve(200, NOW, 'req-a')!;
  a.book.markFinished(leaseA, finishingA, 150, NOW);
  const finishingB = leaseB.reserve(300, NOW, 'req-b')!;
  b.book.markFinished(leaseB, finishingB, 250, NOW);
  // What the node reports (and the control plane then knows): 100 charged + 150 + 250 finished.
  const { figures } = a.book.reportedFigures([leaseA], () => NOW);
  t.equal(figures.get(leaseA)!.spent, 500);
  a.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000, expiresAt: EXPIRES, knownSpentMicros: 500 });
  t.match(storedLease(dir, 'lease-1'), { spent: 100, reserved: 500 }, 'the known spend changes nothing');
  leaseA.settle(finishingA, 150);
  leaseB.settle(finishingB, 250);
  t.match(storedLease(dir, 'lease-1'), { spent: 500, reserved: 0 }, 'each finished request is charged once: the book agrees with the control plane');
});

t.test('the credit channel takes the known spend from a LeaseGrant message, and an older control plane leaves the book as it is', async (t) => {
  const dir = stateDir(t);
  const { book } = openBook(t, dir);
  const channel = new CreditChannel(book, { reportIntervalMs: 60_000, logger, now: () => NOW });
  t.teardown(() => channel.stop());
  const grant = (leaseId: string, accountId: string, knownSpentMicros?: bigint): ControlMessage => ({
    leaseGrant: { accountId, leaseId, amountMicros: 1_000n, expiresAt: BigInt(EXPIRES), ...(knownSpentMicros === undefined ? {} : { knownSpentMicros }) },
  });
  t.equal(channel.onMessage(grant('lease-1', 'acct-1', 400n)), true);
  t.equal(book.leaseOf('acct-1')!.spent, 400, 'the known spend is counted');
  t.equal(channel.onMessage(grant('lease-2', 'acct-2')), true);
  t.equal(book.leaseOf('acct-2')!.spent, 0, 'a grant without it (older control plane) starts from nothing, as before');
  channel.onMessage(grant('lease-3', 'acct-3', BigInt(Number.MAX_SAFE_INTEGER) + 1n));
  t.equal(book.leaseOf('acct-3'), undefined, 'a known spend past the safe range makes the grant malformed: ignored');
});
