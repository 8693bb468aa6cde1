// The figures a node reports count a request that finished, its charge still to come, as spent at
// its cost — also when another replica on the state dir served it: the replica holding the control
// link reads the finished marks from credit-leases.sqlite with the leases' figures. Each request is
// counted once whatever the order of its charge and the report, one that finished after the
// report's moment (a clock stepped back) stays reserved, and a lease book written by an earlier
// release (no finished columns) takes them on at open.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import type { NodeMessage } from '../../../proto/src/index.js';
import { CreditChannel } from '../../../edge-node/src/billing/credit-channel.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LEASE_DB_FILE, openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import type { LeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { quietLogger } from '../spool/spool-helpers.js';

const NOW = Date.now();

function stateDir(t: Test): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-finished-marks-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function replica(t: Test, dir: string, owner: number): { store: LeaseStore; book: LeaseBook } {
  const store = openLeaseStore(dir, { nodeId: 'n1', owner });
  t.teardown(() => store.close());
  return { store, book: new LeaseBook(store) };
}

/** The control link's channel on `book`, its clock at `now()`; returns what a report sends. */
function linkHolder(t: Test, book: LeaseBook, now: () => number): () => { spent: bigint; reserved: bigint; remaining: bigint; at: bigint } {
  const sent: NodeMessage[] = [];
  const channel = new CreditChannel(book, { reportIntervalMs: 3_600_000, logger: quietLogger(), now });
  t.teardown(() => channel.stop());
  channel.onEstablished((m) => {
    sent.push(m);
    return true;
  }, { sessionId: 's' });
  return () => {
    sent.length = 0;
    channel.reportAll();
    const r = sent.find((m) => m.leaseReport !== undefined)!.leaseReport!;
    return { spent: r.spentMicros, reserved: r.reservedMicros, remaining: r.remainingMicros, at: r.reportedAt };
  };
}

t.test("a request another replica finished counts in the link holder's report as spent at its cost, once, before and after its charge", async (t) => {
  const dir = stateDir(t);
  const holder = replica(t, dir, 1);
  holder.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 10_000, expiresAt: NOW + 60_000 });
  const server = replica(t, dir, 2);
  const report = linkHolder(t, holder.book, () => NOW);

  const lease = server.book.storedLeaseOf('acct-1')!;
  const finishing = lease.reserve(1_000, NOW - 10, 'req-finished')!;
  const inFlight = lease.reserve(2_000, NOW - 10, 'req-in-flight')!;
  t.same(report(), { spent: 0n, reserved: 3_000n, remaining: 7_000n, at: BigInt(NOW) }, 'both in flight');

  // The serving replica worked out the cost; its record is being committed, the charge waits.
  server.book.markFinished(lease, finishing, 300, NOW - 5);
  t.same(report(), { spent: 300n, reserved: 2_000n, remaining: 7_700n, at: BigInt(NOW) }, 'finished: spent at its cost, not reserved');
  lease.settle(finishing, 300);
  t.same(report(), { spent: 300n, reserved: 2_000n, remaining: 7_700n, at: BigInt(NOW) }, 'charged: the same figures, not counted twice');

  // A finish stamped after the report's moment (the host's clock stepped back): in flight at it.
  server.book.markFinished(lease, inFlight, 500, NOW + 1_000);
  t.same(report(), { spent: 300n, reserved: 2_000n, remaining: 7_700n, at: BigInt(NOW) }, 'a finish after the figures stays reserved');
  lease.settle(inFlight, 500);
  t.same(report(), { spent: 800n, reserved: 0n, remaining: 9_200n, at: BigInt(NOW) });
});

t.test("a stopping link holder's return hands back what another replica's finished request will not cost", async (t) => {
  const dir = stateDir(t);
  const holder = replica(t, dir, 1);
  holder.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 10_000, expiresAt: NOW + 60_000 });
  const server = replica(t, dir, 2);
  const lease = server.book.storedLeaseOf('acct-1')!;
  const finishing = lease.reserve(4_000, NOW - 10, 'req-1')!;
  server.book.markFinished(lease, finishing, 1_000, NOW - 5);

  const sent: NodeMessage[] = [];
  const channel = new CreditChannel(holder.book, { reportIntervalMs: 3_600_000, logger: quietLogger(), now: () => NOW, returnConfirmWaitMs: 10_000 });
  t.teardown(() => channel.stop());
  channel.onEstablished((m) => {
    sent.push(m);
    return true;
  }, { sessionId: 's' });
  const stopped = channel.returnAll();
  const r = sent.find((m) => m.leaseReturn !== undefined)!.leaseReturn!;
  channel.onMessage({ leaseReturnAck: { leaseId: 'lease-1' } });
  await stopped;
  t.same({ spent: r.spentMicros, returned: r.returnedMicros, reserved: r.reservedMicros, at: r.returnedAt }, { spent: 1_000n, returned: 9_000n, reserved: 0n, at: BigInt(NOW) },
    'its cost kept, the rest of its reservation handed back');
  lease.settle(finishing, 1_000);
  t.match(server.store.load().find((l) => l.leaseId === 'lease-1'), { state: 'returned', granted: 10_000, spent: 1_000, reserved: 0 }, 'the node charges the same cost');
});

t.test('a lease book of an earlier release, without finished marks, takes them on when opened', async (t) => {
  const dir = stateDir(t);
  const db = new Database(path.join(dir, LEASE_DB_FILE));
  db.exec(`create table leases (lease_id text primary key, account_id text not null, granted integer not null, spent integer not null,
      reserved integer not null, expires_at integer not null, state text not null check (state in ('open', 'returned')), node_id text);
    create table reservations (request_id text primary key, lease_id text not null, amount integer not null, owner_slot integer, forwarded integer not null default 0);
    insert into leases values ('lease-1', 'acct-1', 10000, 0, 0, ${NOW + 60_000}, 'open', 'n1');`);
  db.close();
  const { book } = replica(t, dir, 1);
  const report = linkHolder(t, book, () => NOW);
  const lease = book.leaseOf('acct-1')!;
  const reservation = lease.reserve(1_000, NOW - 10, 'req-1')!;
  book.markFinished(lease, reservation, 100, NOW - 5);
  t.same(report(), { spent: 100n, reserved: 0n, remaining: 9_900n, at: BigInt(NOW) });
  const columns = new Database(path.join(dir, LEASE_DB_FILE), { readonly: true });
  t.teardown(() => columns.close());
  t.same(columns.prepare("select finished_cost, finished_at from reservations where request_id = 'req-1'").get(), { finished_cost: 100, finished_at: NOW - 5 },
    'the mark is on disk for the other replicas');
});
