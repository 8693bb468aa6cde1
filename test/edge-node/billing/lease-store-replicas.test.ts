// Replicas on one state dir share credit-leases.sqlite, each with the lease book it loaded at start
// (credit leases are kept per process: docs/node-api.md). What one replica returned must stay
// returned on disk when another writes the same lease later, or a restart would serve from credit
// the control plane took back.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';

const NOW = 1_700_000_000_000;

t.test('a lease one replica returned stays returned when another replica writes it later, and a restart does not serve from it', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-lease-replicas-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const storeA = openLeaseStore(dir, { nodeId: 'n1', owner: 1 });
  const bookA = new LeaseBook(storeA);
  bookA.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000, expiresAt: NOW + 60_000 });
  const storeB = openLeaseStore(dir, { nodeId: 'n1', owner: 2 });
  t.teardown(() => storeB.close());
  const bookB = new LeaseBook(storeB);
  const leaseB = bookB.leaseOf('acct-1')!;
  t.ok(leaseB, 'replica B loaded the open lease at its start');

  // A (the control link's holder) returns the lease at its stop; B still serves a request from it.
  bookA.markReturned(bookA.leaseOf('acct-1')!);
  storeA.close();
  const r = leaseB.reserve(100, NOW, 'req-b')!;
  leaseB.settle(r, 40);
  t.equal(leaseB.state, 'returned', "B learns of the return with its first write, and reserves nothing more");
  t.equal(leaseB.reserve(1, NOW, 'req-b2'), undefined);
  t.equal(bookB.leaseOf('acct-1'), undefined, 'nor is it offered as the account\'s lease, or reported as open');
  t.same(bookB.openLeases(), []);

  const again = openLeaseStore(dir, { nodeId: 'n1', owner: 1 });
  t.teardown(() => again.close());
  const row = again.load().find((l) => l.leaseId === 'lease-1');
  t.equal(row?.state, 'returned', 'still returned on disk');
  t.equal(row?.spent, 40, "B's charge is written");
  const restarted = new LeaseBook(again);
  t.equal(restarted.leaseOf('acct-1'), undefined, 'a restarted replica has no open lease to serve from');
  t.equal(restarted.lease('lease-1')?.state, 'returned');
});
