// The lease store records which node each lease was granted to: a state dir enrolled as a new node
// (spool.db moved aside, credit-leases.sqlite kept) does not serve from the old node's leases; their
// rows are kept, and a warning names both node ids.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LEASE_DB_FILE, openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';

const NOW = 1_700_000_000_000;

function warnings(): { logger: { warn: (o: unknown, m: string) => void; info: (o: unknown, m: string) => void }; warned: Array<{ obj: Record<string, unknown>; msg: string }> } {
  const warned: Array<{ obj: Record<string, unknown>; msg: string }> = [];
  return { warned, logger: { warn: (obj, msg) => warned.push({ obj: obj as Record<string, unknown>, msg }), info: () => undefined } };
}

function stateDir(t: { teardown(fn: () => void): void }): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-lease-node-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

t.test("a state dir enrolled as a new node does not serve from the old node's leases, keeps their rows and warns naming both ids", async (t) => {
  const dir = stateDir(t);
  const old = openLeaseStore(dir, { nodeId: 'node-old' });
  const oldBook = new LeaseBook(old);
  oldBook.grant({ accountId: 'acct-1', leaseId: 'lease-old', amountMicros: 5_000_000, expiresAt: NOW + 60_000 });
  old.close();

  const { logger, warned } = warnings();
  const store = openLeaseStore(dir, { nodeId: 'node-new', logger: logger as never });
  const book = new LeaseBook(store);
  t.equal(book.leaseOf('acct-1'), undefined, 'nothing to reserve from until the control plane grants this node a lease');
  t.equal(book.lease('lease-old'), undefined);
  t.equal(warned.length, 1);
  t.match(warned[0]!.msg, /node-old/);
  t.match(warned[0]!.msg, /node-new/);
  t.same({ nodeId: warned[0]!.obj.nodeId, otherNodeId: warned[0]!.obj.otherNodeId }, { nodeId: 'node-new', otherNodeId: 'node-old' });

  book.grant({ accountId: 'acct-1', leaseId: 'lease-new', amountMicros: 1_000, expiresAt: NOW + 60_000 });
  t.equal(book.leaseOf('acct-1')!.leaseId, 'lease-new');
  store.close();

  const db = new Database(path.join(dir, LEASE_DB_FILE), { readonly: true });
  t.teardown(() => db.close());
  t.same(db.prepare('select lease_id, node_id, granted from leases order by lease_id').all(), [
    { lease_id: 'lease-new', node_id: 'node-new', granted: 1_000 },
    { lease_id: 'lease-old', node_id: 'node-old', granted: 5_000_000 },
  ], "the old node's row is kept as it was");

  const reopenedOld = openLeaseStore(dir, { nodeId: 'node-old' });
  t.teardown(() => reopenedOld.close());
  t.equal(new LeaseBook(reopenedOld).leaseOf('acct-1')?.leaseId, 'lease-old', 'the old node (moved back) still has its lease');
});

t.test('leases written before node ids were recorded are taken by the node that opens the file', async (t) => {
  const dir = stateDir(t);
  const db = new Database(path.join(dir, LEASE_DB_FILE));
  db.exec(`create table leases (lease_id text primary key, account_id text not null, granted integer not null, spent integer not null,
    reserved integer not null, expires_at integer not null, state text not null check (state in ('open', 'returned')))`);
  db.prepare('insert into leases values (?, ?, ?, ?, ?, ?, ?)').run('lease-1', 'acct-1', 1_000, 100, 50, NOW + 60_000, 'open');
  db.close();
  const { logger, warned } = warnings();
  const store = openLeaseStore(dir, { nodeId: 'node-1', logger: logger as never });
  t.teardown(() => store.close());
  const lease = new LeaseBook(store).leaseOf('acct-1')!;
  t.equal(lease.spent, 150, 'its spend and in-flight reservations kept');
  t.equal(warned.length, 0);
});
