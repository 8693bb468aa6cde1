// Every clean stop returns each account's lease and the next connection grants new ones, so
// credit-leases.sqlite would grow by a row per account per restart. Returned leases that expired
// more than a day ago are removed when the file opens; everything that still means money stays.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';

const NOW = 1_700_000_000_000;
const DAY = 24 * 60 * 60 * 1000;

t.test('returned leases expired more than a day ago are removed at open; open, recent, reserved and other nodes\' leases stay', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-lease-prune-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const early = NOW - 10 * DAY;
  const store = openLeaseStore(dir, { nodeId: 'n1', owner: 1, now: () => early });
  const book = new LeaseBook(store);
  const grant = (leaseId: string, accountId: string, expiresAt: number): void => void book.grant({ accountId, leaseId, amountMicros: 1_000, expiresAt });
  grant('old-returned', 'a1', NOW - 2 * DAY);
  book.markReturned(book.lease('old-returned')!);
  grant('recent-returned', 'a2', NOW - DAY / 2);
  book.markReturned(book.lease('recent-returned')!);
  grant('old-open', 'a3', NOW - 2 * DAY);
  grant('old-returned-held', 'a4', NOW - 2 * DAY);
  const held = book.lease('old-returned-held')!;
  held.reserve(100, early, 'req-still-held');
  book.markReturned(held);
  store.close();
  const other = openLeaseStore(dir, { nodeId: 'n2', now: () => early });
  const otherBook = new LeaseBook(other);
  otherBook.grant({ accountId: 'a5', leaseId: 'other-node-returned', amountMicros: 1_000, expiresAt: NOW - 2 * DAY });
  otherBook.markReturned(otherBook.lease('other-node-returned')!);
  other.close();

  const info: unknown[] = [];
  const reopened = openLeaseStore(dir, { nodeId: 'n1', now: () => NOW, logger: { info: (o: unknown) => void info.push(o), warn: () => undefined } });
  t.teardown(() => reopened.close());
  t.same(reopened.load().map((l) => l.leaseId).sort(), ['old-open', 'old-returned-held', 'recent-returned'], 'only the returned lease expired over a day ago and holding nothing is gone');
  t.match(info, [{ nodeId: 'n1', leases: 1 }], 'and its removal is logged with the count');
  const again = openLeaseStore(dir, { nodeId: 'n2', now: () => NOW });
  t.teardown(() => again.close());
  t.same(again.load().map((l) => l.leaseId), [], "n2's own expired return goes when n2 opens the file");
});
