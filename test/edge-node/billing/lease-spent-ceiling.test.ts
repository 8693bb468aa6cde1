// A lease's spent figure is held at Number.MAX_SAFE_INTEGER: an upstream whose usage prices beyond
// it is charged the ceiling (request-cost.ts), and a figure past it, written inexact, would make
// credit-leases.sqlite unreadable and the node unable to start.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LEASE_DB_FILE, openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';

const NOW = 1_700_000_000_000;

function stateDir(t: { teardown(fn: () => void): void }): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-lease-ceiling-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

t.test('a cost priced at the ceiling is spent at the ceiling, and the lease file still opens after it', async (t) => {
  const dir = stateDir(t);
  const store = openLeaseStore(dir, { nodeId: 'n1' });
  const book = new LeaseBook(store);
  book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000_000, expiresAt: NOW + 60_000 });
  const lease = book.leaseOf('acct-1')!;
  lease.settle(lease.reserve(10, NOW, 'r1')!, 5);
  // An upstream whose usage prices beyond 2^53 micro-units is charged Number.MAX_SAFE_INTEGER (request-cost.ts).
  lease.settle(lease.reserve(10, NOW, 'r2')!, Number.MAX_SAFE_INTEGER);
  t.equal(lease.spent, Number.MAX_SAFE_INTEGER, 'spent stops at the ceiling, exact');
  t.equal(lease.reserve(1, NOW, 'r3'), undefined, 'and nothing more is served from it');
  store.close();

  // What a release without the ceiling wrote: a spent figure past 2^53 (inexact). It opens, held at the ceiling.
  const db = new Database(path.join(dir, LEASE_DB_FILE));
  db.prepare('update leases set spent = ? where lease_id = ?').run(2 ** 60, 'lease-1');
  db.close();
  const again = openLeaseStore(dir, { nodeId: 'n1' });
  t.teardown(() => again.close());
  const reopened = new LeaseBook(again).lease('lease-1');
  t.equal(reopened?.spent, Number.MAX_SAFE_INTEGER);
});
