/**
 * Counters in a SQLite file in the node's state dir, opened by every replica of the node so a
 * limit holds node-wide. Each admit is one short BEGIN IMMEDIATE transaction. Limits need no
 * durability, so synchronous=OFF (a file an OS crash left damaged is moved aside and made anew at
 * open: rate-limit-file.ts); WAL lets readers and the one writer overlap; busy_timeout makes
 * replicas queue for the write lock instead of failing — briefly: the calls are synchronous, so a
 * wait blocks the event loop. A write that still finds the lock taken (or fails: a full disk) gives
 * up; for a while after, calls wait only a few ms (one stuck writer must not cost every request the
 * whole wait, yet an admit must still ride out another replica's ordinary sub-ms transaction rather
 * than fail open), and releases and token true-ups are not tried then at all. The writes that were
 * not made are kept in memory and made by the next admit's transaction, or a retry timer, whichever
 * comes first.
 *
 * Concurrency slots carry their owner (one id per store instance). Owners renew a lease (`leases`);
 * when a limit looks full, slots of owners whose lease ran out (a replica killed with -9) are dropped
 * before counting again, so a dead replica's slots never leak for longer than the lease (and each
 * heartbeat drops them and their leases too, so they do not stay in the file). Leases are
 * timed on the host's monotonic clock (Clock.hostMonotonic), which every replica on the host reads
 * alike: a lease on the wall clock would run out at once when the wall clock steps forward (NTP, a
 * VM resume) before the owner's next beat, and the first replica to find a limit full would drop the
 * slots of replicas still serving them. A lease renewed "later" than now was written before the host
 * booted (the monotonic clock starts again near 0): dead too. Windows stay on the wall clock.
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import type Database from 'better-sqlite3';
import type { Logger } from '../logger.js';
import type { Clock } from '../pipeline/clock.js';
import type { AdmitOutcome, AdmitQuery, LimitStore, WindowChange } from './limit-store.js';
import { openRateLimitDatabase } from './rate-limit-file.js';
import { WINDOW_MS, fits, minuteOf } from './sliding-window.js';
import type { WindowCounts } from './sliding-window.js';

export const RATE_LIMIT_FILE = 'rate-limits.sqlite';
export const DEFAULT_OWNER_LEASE_MS = 30_000;
/** How long a call queues for the write lock. A transaction holds it well under a millisecond. */
const BUSY_TIMEOUT_MS = 250;
/** After a write found the lock taken for the whole wait, calls wait only IMPATIENT_BUSY_TIMEOUT_MS for this long. */
const IMPATIENT_MS = 1_000;
/** The wait while impatient: bounds the stall, but covers a few lock hand-offs between replicas (0 would fail open on each). */
const IMPATIENT_BUSY_TIMEOUT_MS = 15;
/** When writes that failed are tried again if no admit comes first. */
const RETRY_MS = 250;
/** Token true-ups kept while the file cannot be written; beyond this they are dropped (limits are off then anyway: admits fail open). */
const MAX_PENDING_CHANGES = 10_000;

export interface SqliteLimitStoreOptions {
  /** The state dir (the file is RATE_LIMIT_FILE in it), or a file path ending in .sqlite. */
  location: string;
  clock: Clock;
  /** How long a replica's slots survive without a heartbeat (default 30 s of the host's monotonic clock). */
  ownerLeaseMs?: number;
  /** Renew the lease on a timer (default true); tests that move the clock by hand may turn it off. */
  heartbeatTimer?: boolean;
  /** Told when a damaged file was moved aside and made anew (rate-limit-file.ts). */
  logger?: Logger;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS windows (
  subject TEXT NOT NULL,
  metric TEXT NOT NULL,
  minute INTEGER NOT NULL,
  used REAL NOT NULL,
  PRIMARY KEY (subject, metric, minute)
) WITHOUT ROWID;
-- The wall-clock leases of earlier releases: their owners' slots go like any other dead owner's.
DROP TABLE IF EXISTS owners;
-- Host monotonic ms (Clock.hostMonotonic), both read under the write lock: renewed_at is never
-- ahead of a later reader's now unless the host rebooted since.
CREATE TABLE IF NOT EXISTS leases (
  owner TEXT PRIMARY KEY,
  renewed_at INTEGER NOT NULL,
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
  /** Host monotonic ms of the last lease renewal. */
  private lastBeatMs = Number.NEGATIVE_INFINITY;
  private readonly timer: NodeJS.Timeout | undefined;
  private closed = false;
  /** Slots this instance holds and has not released: any other slot of its owner in the file is one whose release failed. */
  private readonly liveSlots = new Set<string>();
  /** A release failed: the next write frees every slot of this owner that is not live. */
  private slotsToFree = false;
  /** The heartbeat at start-up found the file locked (or failed): the retry timer beats until one succeeds. */
  private beatMissed = false;
  /** True-ups not written yet, in order. */
  private pendingChanges: WindowChange[] = [];
  private retryTimer: NodeJS.Timeout | undefined;
  /** performance.now() until which calls wait only IMPATIENT_BUSY_TIMEOUT_MS (0 when they wait BUSY_TIMEOUT_MS). */
  private impatientUntil = 0;

  /** The minute of the last admit (a later one that is more than a minute earlier: the clock stepped back). */
  private newestMinute = Number.NEGATIVE_INFINITY;
  private readonly getWindows: Database.Statement<[string, string, number, number], { minute: number; used: number }>;
  private readonly addWindow: Database.Statement<[string, string, number, number]>;
  private readonly refundWindow: Database.Statement<[number, string, string, number]>;
  private readonly countSlots: Database.Statement<[string], { n: number }>;
  private readonly insertSlot: Database.Statement<[string, string, string]>;
  private readonly deleteSlots: Database.Statement<[string]>;
  private readonly deleteUnheldSlots: Database.Statement<[string, string]>;
  private readonly renewLease: Database.Statement<{ owner: string; now: number; expiresAt: number }>;
  private readonly purgeDeadSlots: Database.Statement<{ now: number }>;
  private readonly purgeDeadLeases: Database.Statement<{ now: number }>;
  private readonly purgeOldWindows: Database.Statement<[number]>;
  private readonly windowsAhead: Database.Statement<[number], { subject: string; metric: string; newest: number }>;
  private readonly dropStaleWindows: Database.Statement<{ subject: string; metric: string; minute: number; newest: number }>;
  private readonly copyWindowsBack: Database.Statement<{ subject: string; metric: string; minute: number; newest: number }>;
  private readonly dropWindowsAhead: Database.Statement<{ subject: string; metric: string; minute: number; newest: number }>;
  private readonly admitTx: Database.Transaction<(query: AdmitQuery) => AdmitOutcome>;
  private readonly changeTx: Database.Transaction<(changes: readonly WindowChange[], nowMinute: number) => void>;
  private readonly beatTx: Database.Transaction<() => void>;

  constructor(opts: SqliteLimitStoreOptions) {
    this.file = opts.location.endsWith('.sqlite') ? opts.location : path.join(opts.location, RATE_LIMIT_FILE);
    this.clock = opts.clock;
    this.leaseMs = opts.ownerLeaseMs ?? DEFAULT_OWNER_LEASE_MS;
    // Key and account ids live here: owner-only like the rest of the state dir.
    this.db = openRateLimitDatabase(this.file, { busyTimeoutMs: BUSY_TIMEOUT_MS, schema: SCHEMA, logger: opts.logger });
    // The two newest minutes from the one before now to the one after: usually now and the one
    // before, but the next minute too when it was written before the wall clock stepped back a
    // little. Minutes further ahead (a step back of more than a minute) are moved back first
    // (moveBackAhead): read where they were, they would refuse callers for as long as the step.
    this.getWindows = this.db.prepare('SELECT minute, used FROM windows WHERE subject = ? AND metric = ? AND minute BETWEEN ? AND ? ORDER BY minute DESC LIMIT 2');
    this.addWindow = this.db.prepare(
      'INSERT INTO windows (subject, metric, minute, used) VALUES (?, ?, ?, ?) ON CONFLICT (subject, metric, minute) DO UPDATE SET used = used + excluded.used',
    );
    this.refundWindow = this.db.prepare('UPDATE windows SET used = MAX(0, used + ?) WHERE subject = ? AND metric = ? AND minute = ?');
    this.countSlots = this.db.prepare('SELECT count(*) AS n FROM slots WHERE subject = ?');
    this.insertSlot = this.db.prepare('INSERT OR IGNORE INTO slots (id, subject, owner) VALUES (?, ?, ?)');
    this.deleteSlots = this.db.prepare('DELETE FROM slots WHERE id = ?');
    this.deleteUnheldSlots = this.db.prepare('DELETE FROM slots WHERE owner = ? AND id NOT IN (SELECT value FROM json_each(?))');
    this.renewLease = this.db.prepare(
      'INSERT INTO leases (owner, renewed_at, expires_at) VALUES (@owner, @now, @expiresAt) ' +
        'ON CONFLICT (owner) DO UPDATE SET renewed_at = excluded.renewed_at, expires_at = excluded.expires_at',
    );
    this.purgeDeadSlots = this.db.prepare(
      'DELETE FROM slots WHERE owner NOT IN (SELECT owner FROM leases WHERE renewed_at <= @now AND expires_at > @now)',
    );
    this.purgeDeadLeases = this.db.prepare('DELETE FROM leases WHERE renewed_at > @now OR expires_at <= @now');
    // Gone: minutes no check reads any more.
    this.purgeOldWindows = this.db.prepare('DELETE FROM windows WHERE minute < ?');
    this.windowsAhead = this.db.prepare('SELECT subject, metric, max(minute) AS newest FROM windows WHERE minute > ? GROUP BY subject, metric');
    this.dropStaleWindows = this.db.prepare(
      'DELETE FROM windows WHERE subject = @subject AND metric = @metric AND minute NOT IN (@minute - 1, @minute, @newest - 1, @newest)',
    );
    this.copyWindowsBack = this.db.prepare(
      'INSERT INTO windows (subject, metric, minute, used) SELECT subject, metric, minute - (@newest - @minute), used FROM windows ' +
        'WHERE subject = @subject AND metric = @metric AND minute >= @newest - 1 ON CONFLICT (subject, metric, minute) DO UPDATE SET used = used + excluded.used',
    );
    this.dropWindowsAhead = this.db.prepare('DELETE FROM windows WHERE subject = @subject AND metric = @metric AND minute >= @newest - 1');
    this.admitTx = this.db.transaction((query: AdmitQuery) => this.admitInTransaction(query));
    this.changeTx = this.db.transaction((changes: readonly WindowChange[], nowMinute: number) => {
      this.writePending(nowMinute);
      this.writeChanges(changes, nowMinute);
    });
    this.beatTx = this.db.transaction(() => {
      const leaseNow = this.clock.hostMonotonic();
      this.renew(leaseNow);
      // Dead replicas' rows go here too, not only when a limit looks full (admit): a file whose
      // limits are never reached would otherwise keep every killed replica's slots and lease.
      this.purgeDeadSlots.run({ now: leaseNow });
      this.purgeDeadLeases.run({ now: leaseNow });
      const minute = minuteOf(this.clock.now());
      this.moveBackAhead(minute);
      // So an idle replica's next admit sees a later step back too (below) rather than wait for a beat.
      this.newestMinute = minute;
      this.purgeOldWindows.run(minute - 1);
      this.writePending(minute);
    });
    try {
      this.heartbeat();
    } catch {
      // Another replica holds the lock past the wait (or the file cannot be written): the replica
      // starts anyway, as any write that cannot be made now is made later; until then its admits
      // renew the lease themselves, or are admitted without limits while the file stays locked.
      this.beatMissed = true;
      this.retrySoon();
    }
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
    const outcome = this.write(() => this.admitTx.immediate(query));
    // The transaction also made the writes that were waiting.
    this.pendingWritten();
    if (outcome.admitted && query.slots.length > 0) this.liveSlots.add(query.slotId);
    for (const { slotId } of query.adopt) this.liveSlots.add(slotId);
    return outcome;
  }

  change(changes: readonly WindowChange[]): void {
    if (this.closed || changes.length === 0) return;
    if (this.isImpatient()) {
      // Deferrable: left to the next admit's transaction (or the retry timer), so the lock stays free for admits.
      this.keepPending(changes);
      return;
    }
    try {
      this.write(() => this.changeTx.immediate(changes, minuteOf(this.clock.now())));
    } catch (err) {
      this.keepPending(changes);
      throw err;
    }
    this.pendingWritten();
  }

  release(slotId: string): void {
    if (this.closed) return;
    // Forgotten first: whatever happens below, a later write frees it (deleteUnheldSlots).
    this.liveSlots.delete(slotId);
    if (this.isImpatient()) {
      // Deferrable, as a true-up is: the slot is counted a little longer, never leaked.
      this.slotsToFree = true;
      this.retrySoon();
      return;
    }
    try {
      this.write(() => this.deleteSlots.run(slotId));
    } catch (err) {
      this.slotsToFree = true;
      this.retrySoon();
      throw err;
    }
  }

  /** Renews this replica's lease, drops dead replicas' slots and leases and counters no window reads any more, makes the writes that were waiting. */
  heartbeat(): void {
    if (this.closed) return;
    this.write(() => this.beatTx.immediate());
    this.pendingWritten();
    this.beatMissed = false;
  }

  /** Whether writes that failed are still waiting (tests). */
  hasPendingWrites(): boolean {
    return this.beatMissed || this.slotsToFree || this.pendingChanges.length > 0;
  }

  /** Frees this replica's slots and lease (a clean stop). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    if (this.retryTimer !== undefined) clearTimeout(this.retryTimer);
    try {
      this.db.transaction(() => {
        this.db.prepare('DELETE FROM slots WHERE owner = ?').run(this.owner);
        this.db.prepare('DELETE FROM leases WHERE owner = ?').run(this.owner);
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
    if (this.retryTimer !== undefined) clearTimeout(this.retryTimer);
    this.db.close();
  }

  private admitInTransaction(query: AdmitQuery): AdmitOutcome {
    const { nowMs } = query;
    const minute = minuteOf(nowMs);
    // Read under the write lock, as every lease time in the file is: no replica's renewal is ahead of it.
    const leaseNow = this.clock.hostMonotonic();
    // The lease is renewed here too, so this replica's own slots outlive a late timer (a busy event
    // loop). Other replicas' leases are not: they outlive a wall-clock step because they are not on it.
    if (leaseNow - this.lastBeatMs >= this.leaseMs / 3) this.renew(leaseNow);
    // The wall clock stepped back more than a minute since the last admit: the minutes written
    // ahead of it move back now, not at the next heartbeat.
    if (minute + 1 < this.newestMinute) this.moveBackAhead(minute);
    this.newestMinute = minute;
    this.writePending(minute);
    // Requests already in flight that the new limit must count: in before the checks read the slots.
    for (const { slotId, subject } of query.adopt) this.insertSlot.run(slotId, subject, this.owner);
    const windows: WindowCounts[] = [];
    /** The minute each check is charged in (aligned with `query.rates`). */
    const chargeMinutes: number[] = [];
    let failedRate = -1;
    // Every check is read, also after one did not fit: the limiter's Retry-After needs them all.
    for (const [index, check] of query.rates.entries()) {
      const rows = this.getWindows.all(check.subject, check.metric, minute - 1, minute + 1);
      // The next minute already written (the wall clock stepped back a little across a minute
      // boundary): that minute is taken as the current one, from its start, so its counts are never
      // set aside.
      const current = Math.max(minute, rows[0]?.minute ?? minute);
      const at = current > minute ? current * WINDOW_MS : nowMs;
      const counts = { prev: 0, cur: 0 };
      for (const row of rows) {
        if (row.minute === current) counts.cur = row.used;
        else if (row.minute === current - 1) counts.prev = row.used;
      }
      windows.push(counts);
      chargeMinutes.push(current);
      if (failedRate < 0 && !fits(counts, check.charge, check.limit, at)) failedRate = index;
    }
    let failedSlot = -1;
    if (failedRate < 0) {
      let purged = false;
      for (const [index, check] of query.slots.entries()) {
        let inUse = this.countSlots.get(check.subject)?.n ?? 0;
        if (inUse >= check.limit && !purged) {
          // Only a full limit pays for the purge: slots of replicas whose lease ran out go first.
          this.purgeDeadSlots.run({ now: leaseNow });
          this.purgeDeadLeases.run({ now: leaseNow });
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
      for (const [index, check] of query.rates.entries()) {
        if (check.charge > 0) this.addWindow.run(check.subject, check.metric, chargeMinutes[index] ?? minute, check.charge);
      }
      for (const check of query.slots) this.insertSlot.run(query.slotId, check.subject, this.owner);
    }
    return { admitted, windows, failedRate, failedSlot, ...(chargeMinutes.some((m) => m !== minute) ? { chargedMinutes: chargeMinutes } : {}) };
  }

  /** Inside a transaction (so under the write lock): this replica's lease, from `now` on the host's monotonic clock. */
  private renew(now = this.clock.hostMonotonic()): void {
    this.renewLease.run({ owner: this.owner, now, expiresAt: now + this.leaseMs });
    // Kept even if the transaction then rolls back: the next beat comes a third of a lease later, well within it.
    this.lastBeatMs = now;
  }

  /**
   * One synchronous write, waiting for the lock at most BUSY_TIMEOUT_MS, and only
   * IMPATIENT_BUSY_TIMEOUT_MS for a while after a write that found it taken for that long.
   */
  private write<T>(fn: () => T): T {
    this.isImpatient(); // restores the normal wait once the impatient time is over
    try {
      return fn();
    } catch (err) {
      if ((err as { code?: unknown }).code === 'SQLITE_BUSY' && this.impatientUntil === 0 && !this.closed) {
        this.db.pragma(`busy_timeout = ${IMPATIENT_BUSY_TIMEOUT_MS}`);
        this.impatientUntil = performance.now() + IMPATIENT_MS;
      }
      throw err;
    }
  }

  /** Whether a long wait was met lately; back to the normal wait once IMPATIENT_MS has passed. */
  private isImpatient(): boolean {
    if (this.impatientUntil === 0) return false;
    if (performance.now() < this.impatientUntil) return true;
    this.db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    this.impatientUntil = 0;
    return false;
  }

  /** True-ups not written now: kept (up to MAX_PENDING_CHANGES) for the next write. */
  private keepPending(changes: readonly WindowChange[]): void {
    const room = MAX_PENDING_CHANGES - this.pendingChanges.length;
    if (room > 0) this.pendingChanges.push(...changes.slice(0, room));
    this.retrySoon();
  }

  /** Inside a transaction: the releases and true-ups that failed earlier. */
  private writePending(nowMinute: number): void {
    if (this.slotsToFree) this.deleteUnheldSlots.run(this.owner, JSON.stringify([...this.liveSlots]));
    if (this.pendingChanges.length > 0) this.writeChanges(this.pendingChanges, nowMinute);
  }

  /** After a transaction that ran writePending committed. */
  private pendingWritten(): void {
    this.slotsToFree = false;
    if (this.pendingChanges.length > 0) this.pendingChanges = [];
  }

  private writeChanges(changes: readonly WindowChange[], nowMinute: number): void {
    let movedBack = false;
    for (const { subject, metric, minute: chargedIn, delta } of changes) {
      let minute = chargedIn;
      if (minute > nowMinute + 1) {
        // Charged before the wall clock stepped back further than a minute: its counts are (made)
        // the current minute's, so the true-up goes there too, neither lost nor put back ahead.
        if (!movedBack) this.moveBackAhead(nowMinute);
        movedBack = true;
        minute = nowMinute;
      }
      // Usage written late counts in the minute it is written, never in a window already decayed or gone.
      if (delta > 0) this.addWindow.run(subject, metric, Math.max(minute, nowMinute), delta);
      else if (delta < 0) this.refundWindow.run(delta, subject, metric, minute);
    }
  }

  /**
   * Inside a transaction, after the wall clock stepped back more than a minute: each window written
   * further ahead than the next minute moves back so that its newest minute is `minute` (and the
   * one before it `minute - 1`), as the memory store's windows do. Its counts are neither lost (a
   * step of 61–120 s emptied a window) nor held for the length of the step, and they do not count
   * again when the clock catches up. What another replica already wrote at `minute - 1` and `minute`
   * since the step is added to them; the group's other minutes, out of the window, go.
   */
  private moveBackAhead(minute: number): void {
    for (const { subject, metric, newest } of this.windowsAhead.all(minute + 1)) {
      const group = { subject, metric, minute, newest };
      this.dropStaleWindows.run(group);
      // newest → minute, newest − 1 → minute − 1: both below newest − 1, so sources and targets never overlap.
      this.copyWindowsBack.run(group);
      this.dropWindowsAhead.run(group);
    }
  }

  private retrySoon(): void {
    if (this.retryTimer !== undefined || this.closed) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      if (!this.hasPendingWrites()) return;
      try {
        this.heartbeat();
      } catch {
        this.retrySoon();
      }
    }, RETRY_MS);
    this.retryTimer.unref();
  }
}
