/**
 * Counters in a SQLite file in the node's state dir, opened by every replica of the node so a
 * limit holds node-wide. Each admit is one short BEGIN IMMEDIATE transaction. Limits need no
 * durability, so synchronous=OFF; WAL lets readers and the one writer overlap; busy_timeout makes
 * replicas queue for the write lock instead of failing.
 *
 * Concurrency slots carry their owner (one id per store instance). Owners renew a lease
 * (`owners.expires_at`); when a limit looks full, slots of owners whose lease ran out (a replica
 * killed with -9) are dropped before counting again, so a dead replica's slots never leak for longer
 * than the lease.
 */
import { randomUUID } from 'node:crypto';
import { chmodSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { Clock } from '../pipeline/clock.js';
import type { AdmitOutcome, AdmitQuery, LimitStore, RateMetric } from './limit-store.js';
import { fits, minuteOf } from './sliding-window.js';
import type { WindowCounts } from './sliding-window.js';

export const RATE_LIMIT_FILE = 'rate-limits.sqlite';
export const DEFAULT_OWNER_LEASE_MS = 30_000;
const BUSY_TIMEOUT_MS = 2_000;

export interface SqliteLimitStoreOptions {
  /** The state dir (the file is RATE_LIMIT_FILE in it), or a file path ending in .sqlite. */
  location: string;
  clock: Clock;
  /** How long a replica's slots survive without a heartbeat (default 30 s). */
  ownerLeaseMs?: number;
  /** Renew the lease on a timer (default true); tests that move the clock by hand may turn it off. */
  heartbeatTimer?: boolean;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS windows (
  subject TEXT NOT NULL,
  metric TEXT NOT NULL,
  minute INTEGER NOT NULL,
  used REAL NOT NULL,
  PRIMARY KEY (subject, metric, minute)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS owners (
  owner TEXT PRIMARY KEY,
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS slots (
  id TEXT NOT NULL,
  subject TEXT NOT NULL,
  owner TEXT NOT NULL,
  PRIMARY KEY (id, subject)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS slots_by_subject ON slots (subject);
`;

export class SqliteLimitStore implements LimitStore {
  /** This instance's owner id for its slots. */
  readonly owner = randomUUID();
  readonly file: string;
  private readonly db: Database.Database;
  private readonly clock: Clock;
  private readonly leaseMs: number;
  private lastBeatMs = Number.NEGATIVE_INFINITY;
  private readonly timer: NodeJS.Timeout | undefined;
  private closed = false;

  private readonly getWindow: Database.Statement<[string, string, number], { used: number }>;
  private readonly addWindow: Database.Statement<[string, string, number, number]>;
  private readonly adjustWindow: Database.Statement<[number, string, string, number]>;
  private readonly countSlots: Database.Statement<[string], { n: number }>;
  private readonly insertSlot: Database.Statement<[string, string, string]>;
  private readonly deleteSlots: Database.Statement<[string]>;
  private readonly renewOwner: Database.Statement<[string, number]>;
  private readonly purgeDeadSlots: Database.Statement<[number]>;
  private readonly purgeDeadOwners: Database.Statement<[number]>;
  private readonly purgeOldWindows: Database.Statement<[number]>;
  private readonly admitTx: Database.Transaction<(query: AdmitQuery) => AdmitOutcome>;

  constructor(opts: SqliteLimitStoreOptions) {
    this.file = opts.location.endsWith('.sqlite') ? opts.location : path.join(opts.location, RATE_LIMIT_FILE);
    this.clock = opts.clock;
    this.leaseMs = opts.ownerLeaseMs ?? DEFAULT_OWNER_LEASE_MS;
    this.db = new Database(this.file);
    try {
      // Key and account ids live here: owner-only like the rest of the state dir (WAL/SHM files inherit it).
      chmodSync(this.file, 0o600);
      this.db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
      this.db.pragma('journal_mode = WAL');
      this.db.pragma('synchronous = OFF');
      this.db.exec(SCHEMA);
    } catch (err) {
      this.db.close();
      throw err;
    }
    this.getWindow = this.db.prepare('SELECT used FROM windows WHERE subject = ? AND metric = ? AND minute = ?');
    this.addWindow = this.db.prepare(
      'INSERT INTO windows (subject, metric, minute, used) VALUES (?, ?, ?, ?) ON CONFLICT (subject, metric, minute) DO UPDATE SET used = used + excluded.used',
    );
    this.adjustWindow = this.db.prepare('UPDATE windows SET used = MAX(0, used + ?) WHERE subject = ? AND metric = ? AND minute = ?');
    this.countSlots = this.db.prepare('SELECT count(*) AS n FROM slots WHERE subject = ?');
    this.insertSlot = this.db.prepare('INSERT OR IGNORE INTO slots (id, subject, owner) VALUES (?, ?, ?)');
    this.deleteSlots = this.db.prepare('DELETE FROM slots WHERE id = ?');
    this.renewOwner = this.db.prepare(
      'INSERT INTO owners (owner, expires_at) VALUES (?, ?) ON CONFLICT (owner) DO UPDATE SET expires_at = excluded.expires_at',
    );
    this.purgeDeadSlots = this.db.prepare(
      'DELETE FROM slots WHERE owner NOT IN (SELECT owner FROM owners WHERE expires_at > ?)',
    );
    this.purgeDeadOwners = this.db.prepare('DELETE FROM owners WHERE expires_at <= ?');
    this.purgeOldWindows = this.db.prepare('DELETE FROM windows WHERE minute < ?');
    this.admitTx = this.db.transaction((query: AdmitQuery) => this.admitInTransaction(query));
    this.heartbeat();
    if (opts.heartbeatTimer !== false) {
      this.timer = setInterval(() => {
        try {
          this.heartbeat();
        } catch {
          // A busy or broken file: the next beat (or admit) tries again; the lease outlives two misses.
        }
      }, Math.max(1, Math.floor(this.leaseMs / 3)));
      this.timer.unref();
    }
  }

  admit(query: AdmitQuery): AdmitOutcome {
    // IMMEDIATE takes the write lock up front: two replicas never both read and then both write.
    return this.admitTx.immediate(query);
  }

  adjust(subject: string, metric: RateMetric, minute: number, delta: number): void {
    if (delta === 0) return;
    this.adjustWindow.run(delta, subject, metric, minute);
  }

  release(slotId: string): void {
    if (!this.closed) this.deleteSlots.run(slotId);
  }

  /** Renews this replica's lease and drops counters no window reads any more. */
  heartbeat(): void {
    if (this.closed) return;
    const now = this.clock.now();
    this.db.transaction(() => {
      this.renewOwner.run(this.owner, now + this.leaseMs);
      this.purgeOldWindows.run(minuteOf(now) - 1);
    }).immediate();
    this.lastBeatMs = now;
  }

  /** Frees this replica's slots and lease (a clean stop). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    try {
      this.db.transaction(() => {
        this.db.prepare('DELETE FROM slots WHERE owner = ?').run(this.owner);
        this.db.prepare('DELETE FROM owners WHERE owner = ?').run(this.owner);
      }).immediate();
    } finally {
      this.db.close();
    }
  }

  /** Stops without freeing anything, as a killed process would (tests of lease expiry). */
  abandon(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.db.close();
  }

  private admitInTransaction(query: AdmitQuery): AdmitOutcome {
    const { nowMs } = query;
    const minute = minuteOf(nowMs);
    // The lease is renewed here too, so a clock moved by hand (or a late timer) never expires a live replica.
    if (nowMs - this.lastBeatMs >= this.leaseMs / 3) {
      this.renewOwner.run(this.owner, nowMs + this.leaseMs);
      this.lastBeatMs = nowMs;
    }
    const windows: WindowCounts[] = [];
    let failedRate = -1;
    for (const [index, check] of query.rates.entries()) {
      const counts = {
        prev: this.getWindow.get(check.subject, check.metric, minute - 1)?.used ?? 0,
        cur: this.getWindow.get(check.subject, check.metric, minute)?.used ?? 0,
      };
      windows.push(counts);
      if (failedRate < 0 && !fits(counts, check.charge, check.limit, nowMs)) failedRate = index;
    }
    let failedSlot = -1;
    if (failedRate < 0) {
      let purged = false;
      for (const [index, check] of query.slots.entries()) {
        let inUse = this.countSlots.get(check.subject)?.n ?? 0;
        if (inUse >= check.limit && !purged) {
          // Only a full limit pays for the purge: slots of replicas whose lease ran out go first.
          this.purgeDeadSlots.run(nowMs);
          this.purgeDeadOwners.run(nowMs);
          purged = true;
          inUse = this.countSlots.get(check.subject)?.n ?? 0;
        }
        if (inUse >= check.limit) {
          failedSlot = index;
          break;
        }
      }
    }
    const admitted = failedRate < 0 && failedSlot < 0;
    if (admitted) {
      for (const check of query.rates) {
        if (check.charge > 0) this.addWindow.run(check.subject, check.metric, minute, check.charge);
      }
      for (const check of query.slots) this.insertSlot.run(query.slotId, check.subject, this.owner);
    }
    return { admitted, windows, failedRate, failedSlot };
  }
}
