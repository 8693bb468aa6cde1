/**
 * The node's credit leases on disk (`<stateDir>/credit-leases.sqlite`), so a restarted node —
 * online or not — remembers what it spent and what it held. Each change is written through
 * synchronously (one small UPDATE in WAL mode, synchronous=NORMAL): a kill -9 loses nothing,
 * only a power loss can lose the last few writes (docs/billing.md, "Crashes").
 */
import path from 'node:path';
import Database from 'better-sqlite3';
import type { LeaseSnapshot } from './credit-lease.js';

export const LEASE_DB_FILE = 'credit-leases.sqlite';

export interface LeaseStore {
  /** Every lease kept, open and returned. */
  load(): LeaseSnapshot[];
  save(lease: LeaseSnapshot): void;
  close(): void;
}

interface LeaseRow {
  lease_id: string;
  account_id: string;
  granted: number;
  spent: number;
  reserved: number;
  expires_at: number;
  state: string;
}

export function openLeaseStore(stateDir: string): LeaseStore {
  const db = new Database(path.join(stateDir, LEASE_DB_FILE));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.exec(`create table if not exists leases (
    lease_id   text primary key,
    account_id text not null,
    granted    integer not null,
    spent      integer not null,
    reserved   integer not null,
    expires_at integer not null,
    state      text not null check (state in ('open', 'returned'))
  )`);
  const upsert = db.prepare(`insert into leases (lease_id, account_id, granted, spent, reserved, expires_at, state)
    values (@leaseId, @accountId, @granted, @spent, @reserved, @expiresAt, @state)
    on conflict (lease_id) do update set granted = excluded.granted, spent = excluded.spent, reserved = excluded.reserved,
      expires_at = excluded.expires_at, state = excluded.state`);
  const all = db.prepare<[], LeaseRow>('select * from leases');
  return {
    load: () =>
      all.all().map((r) => ({
        leaseId: r.lease_id,
        accountId: r.account_id,
        granted: r.granted,
        spent: r.spent,
        reserved: r.reserved,
        expiresAt: r.expires_at,
        state: r.state === 'returned' ? 'returned' : 'open',
      })),
    save: (lease) => {
      upsert.run(lease);
    },
    close: () => db.close(),
  };
}

/** For stand-alone nodes and tests: nothing kept. */
export const memoryLeaseStore: LeaseStore = { load: () => [], save: () => undefined, close: () => undefined };
