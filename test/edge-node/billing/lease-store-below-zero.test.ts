// A change that would take a lease's figure on disk below 0 (two writers disagreeing about what was
// held, a reservation ended twice) is held at 0, and said in the log with the figures involved, so
// the disagreement can be found rather than silently absorbed.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';

const NOW = Date.now();

t.test('a release of more than the stored reserved amount is held at 0 and logged with the figures', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-lease-below-zero-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const warnings: Array<{ fields: Record<string, unknown>; message: string }> = [];
  const logger = { warn: (fields: Record<string, unknown>, message: string) => void warnings.push({ fields, message }), info: () => undefined };
  const store = openLeaseStore(dir, { nodeId: 'n1', logger: logger as never });
  t.teardown(() => store.close());
  const lease = { leaseId: 'lease-1', accountId: 'acct-1', granted: 100, spent: 10, reserved: 0, expiresAt: NOW + 60_000, state: 'open' as const };
  store.save(lease, lease);
  t.equal(warnings.length, 0, 'a first write warns of nothing');

  // This writer believed 40 was held; the store holds none of it.
  const written = store.save({ ...lease, reserved: 0, spent: 10 }, { ...lease, reserved: 40, spent: 10 });
  t.match(written?.stored, { reserved: 0, spent: 10 }, 'held at 0 on disk');
  t.equal(warnings.length, 1, 'and said');
  t.match(warnings[0], { fields: { leaseId: 'lease-1', accountId: 'acct-1', storedReservedMicros: 0, addReservedMicros: -40 }, message: /below 0; it is held at 0/ });

  store.save({ ...lease, reserved: 5 }, lease);
  t.equal(warnings.length, 1, 'an ordinary change warns of nothing');
});
