// Stands in for node-edge processes in lease-wal-damage.test.ts. argv: state dir, role.
// - `spend`: opens the lease book, grants lease-1 (1 000 000 µ) and charges it 10 000 µ twenty
//   times, one write each as the pipeline's charges are, prints the spent figure and kills itself
//   with SIGKILL: its history is left in the WAL, not checkpointed.
// - `slot`: takes a spool owner slot, as a replica starting at the same time does before it opens
//   the lease book, and holds it.
// - `recovered`: takes a spool owner slot and opens the lease book with a plain connection, as an
//   earlier release (which did not walk the WAL) did: SQLite's recovery drops the commits after a
//   damaged frame. Holds both.
// - `writer`: takes a spool owner slot and charges the lease book without pause, as a busy replica.
// The holding roles print `ready` once they hold what they hold, and run until killed.
import path from 'node:path';
import Database from 'better-sqlite3';
import { LEASE_DB_FILE, openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { SPOOL_FILE } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolOwnerLock } from '../../../edge-node/src/spool/spool-owner-lock.js';

// lease-wal-damage.test.ts expects these figures.
const NODE_ID = 'node-lease-wal-1';
const CHARGES = 20;
const CHARGE_MICROS = 10_000;

const [dir, role] = [process.argv[2] ?? '', process.argv[3] ?? ''];
const lease = { leaseId: 'lease-1', accountId: 'acct-1', granted: 1_000_000, spent: 0, reserved: 0, expiresAt: Date.now() + 86_400_000, state: 'open' as const };

function hold(): void {
  process.stdout.write('ready\n');
  setInterval(() => undefined, 60_000);
}

if (role === 'spend') {
  const store = openLeaseStore(dir, { nodeId: NODE_ID });
  store.save(lease, lease);
  let prev = lease;
  for (let i = 1; i <= CHARGES; i++) {
    const next = { ...prev, spent: i * CHARGE_MICROS };
    store.save(next, prev);
    prev = next;
  }
  process.stdout.write(`${prev.spent}\n`);
  process.kill(process.pid, 'SIGKILL');
} else if (role === 'slot') {
  SpoolOwnerLock.acquire(path.join(dir, SPOOL_FILE));
  hold();
} else if (role === 'recovered') {
  SpoolOwnerLock.acquire(path.join(dir, SPOOL_FILE));
  const db = new Database(path.join(dir, LEASE_DB_FILE));
  db.prepare('select count(*) from sqlite_master').get();
  hold();
} else if (role === 'writer') {
  const slot = SpoolOwnerLock.acquire(path.join(dir, SPOOL_FILE));
  const store = openLeaseStore(dir, { nodeId: NODE_ID, owner: slot.slot });
  let prev = store.load().find((l) => l.leaseId === lease.leaseId) ?? lease;
  let announced = false;
  // Small batches between turns of the event loop, so a SIGKILL lands at once.
  const burst = (): void => {
    for (let i = 0; i < 50; i++) {
      const next = { ...prev, spent: prev.spent + 1 };
      prev = store.save(next, prev)?.stored ?? next;
    }
    if (!announced) {
      announced = true;
      process.stdout.write('ready\n');
    }
    setImmediate(burst);
  };
  burst();
} else {
  throw new Error(`unknown role ${role}`);
}
