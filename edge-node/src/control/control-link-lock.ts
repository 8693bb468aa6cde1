/**
 * Which node-edge process of a state dir runs the control link (ZENOVA_NODE_REPLICAS > 1: several
 * processes serve one node; the control plane keeps one session per node and ends the older one, so
 * two links would knock each other off forever and both rotate credential.json).
 *
 * The lock is one row in `control-link.sqlite` in the state dir: the holder's random id, pid, pid
 * namespace and process start time, and when it last renewed. Taking and renewing happen in one
 * `BEGIN IMMEDIATE` transaction, so of several replicas exactly one takes a free or stale row.
 * Why SQLite and not a pid lock file: taking over a dead holder's file is "check, delete, create",
 * and two replicas doing it at once can each delete the other's fresh file (Node has no flock);
 * a transaction makes check-and-replace one step, and SQLite's own file locks are released by the
 * kernel when a process dies, so `kill -9` never leaves the database locked. The replicas already
 * share SQLite files in the state dir (rate limits, MCP sessions) under the same one-host rule.
 *
 * A row is stale when its holder is dead — its pid is gone, or now belongs to a process started at
 * another time (pid reuse); checked only when the holder ran in this pid namespace, since a pid
 * from another container means nothing here — or when it was not renewed for `ttlMs` (a holder in
 * another namespace, or one stuck). A holder that finds its row taken stops its link; one that
 * cannot write the row (disk full) keeps it, since no other process can write it either.
 *
 * Renewals are timed on the host's monotonic clock (Clock.hostMonotonic, `renewed_host_ms`), which
 * every process on the host reads alike and no wall-clock step moves: on the wall clock a step back
 * left a killed holder's row fresh for the length of the step (no link meanwhile), and a step forward
 * let a replica take the link from a live holder. A renewal ahead of now was written before the host
 * booted: stale. `renewed_at` (wall clock) is still written for replicas of earlier releases, which
 * judge by it during a rolling upgrade; a row they wrote has no `renewed_host_ms` and is judged by
 * `renewed_at` as they judge it.
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import type Database from 'better-sqlite3';
import { isMarkedProcessAlive, pidNamespace, processStartTicks } from '../process-alive.js';
import type { Clock } from '../pipeline/clock.js';
import { systemClock } from '../pipeline/clock.js';
import { openStateDatabase } from '../state/state-database.js';

export const CONTROL_LINK_LOCK_FILE = 'control-link.sqlite';
export const DEFAULT_LOCK_TTL_MS = 10_000;

const SCHEMA = `
  create table if not exists control_link_holder (
    slot        integer primary key check (slot = 1),
    owner       text not null,
    pid         integer not null,
    pid_ns      text,
    start_ticks text,
    acquired_at integer not null,
    renewed_at  integer not null
  );
`;
/** Added after the table's first release (see the top of the file); null in a row an earlier release wrote. */
const HOST_CLOCK_COLUMN = 'renewed_host_ms';

export interface LockHolder {
  owner: string;
  pid: number;
  pidNs: string | null;
  startTicks: string | null;
  acquiredAt: number;
  /** Wall clock, as earlier releases judge it. */
  renewedAt: number;
  /** Host monotonic ms of the last renewal; null when a replica of an earlier release wrote the row. */
  renewedAtHostMs: number | null;
}

export type AcquireResult =
  | { outcome: 'held' }
  | { outcome: 'acquired'; tookOverFrom: LockHolder | undefined; why: 'free' | 'holder-dead' | 'holder-expired' }
  | { outcome: 'busy'; holder: LockHolder };

interface Row {
  owner: string;
  pid: number;
  pid_ns: string | null;
  start_ticks: string | null;
  acquired_at: number;
  renewed_at: number;
  renewed_host_ms: number | null;
}

export interface ControlLinkLockOptions {
  ttlMs?: number;
  /** The wall clock, for acquired_at and the renewed_at earlier releases read. */
  now?: () => number;
  /** What renewals are timed on (default Clock.hostMonotonic). */
  hostMonotonic?: Clock['hostMonotonic'];
  /** Tests: the liveness check of another process (default: signal 0 and /proc start time). */
  isHolderAlive?: (holder: LockHolder) => boolean;
}

export class ControlLinkLock {
  readonly owner = randomUUID();
  readonly file: string;
  private readonly db: Database.Database;
  private readonly ttlMs: number;
  private readonly now: () => number;
  private readonly hostMonotonic: () => number;
  private readonly pidNs = pidNamespace();
  private readonly startTicks = processStartTicks(process.pid);
  private readonly isHolderAlive: (holder: LockHolder) => boolean;

  constructor(stateDir: string, opts: ControlLinkLockOptions = {}) {
    this.file = path.join(stateDir, CONTROL_LINK_LOCK_FILE);
    // A short busy wait: these calls are synchronous, and a tick that finds the file busy just tries again later.
    this.db = openStateDatabase(this.file, { busyTimeoutMs: 200, synchronous: 'NORMAL', schema: SCHEMA });
    try {
      addHostClockColumn(this.db);
    } catch (err) {
      this.db.close();
      throw err;
    }
    this.ttlMs = opts.ttlMs ?? DEFAULT_LOCK_TTL_MS;
    this.now = opts.now ?? Date.now;
    this.hostMonotonic = opts.hostMonotonic ?? (() => systemClock.hostMonotonic());
    this.isHolderAlive = opts.isHolderAlive ?? ((holder) => this.defaultAlive(holder));
  }

  /** Takes the lock when free or stale, renews it when held; never waits for a live holder. */
  tryAcquire(): AcquireResult {
    const run = this.db.transaction((): AcquireResult => {
      const row = this.db.prepare(`select ${COLUMNS} from control_link_holder where slot = 1`).get() as Row | undefined;
      const now = this.now();
      const hostNow = this.hostMonotonic();
      if (row !== undefined && row.owner === this.owner) {
        this.db.prepare('update control_link_holder set renewed_at = ?, renewed_host_ms = ? where slot = 1').run(now, hostNow);
        return { outcome: 'held' };
      }
      let why: 'free' | 'holder-dead' | 'holder-expired' = 'free';
      const holder = row === undefined ? undefined : holderOf(row);
      if (holder !== undefined) {
        if (!this.isHolderAlive(holder)) why = 'holder-dead';
        else if (this.isExpired(holder, now, hostNow)) why = 'holder-expired';
        else return { outcome: 'busy', holder };
      }
      this.db
        .prepare('insert or replace into control_link_holder (slot, owner, pid, pid_ns, start_ticks, acquired_at, renewed_at, renewed_host_ms) values (1, ?, ?, ?, ?, ?, ?, ?)')
        .run(this.owner, process.pid, this.pidNs, this.startTicks, now, now, hostNow);
      return { outcome: 'acquired', tookOverFrom: holder, why };
    });
    return run.immediate();
  }

  /** Renews a held lock; false when another process holds it now (this one must stop its link). */
  renew(): boolean {
    return this.db.prepare('update control_link_holder set renewed_at = ?, renewed_host_ms = ? where slot = 1 and owner = ?').run(this.now(), this.hostMonotonic(), this.owner).changes === 1;
  }

  /** Gives the lock up (a clean stop) so another replica takes it at its next try. */
  release(): void {
    this.db.prepare('delete from control_link_holder where slot = 1 and owner = ?').run(this.owner);
  }

  /**
   * Another live process that holds the lock now, by a read alone (no write: it works while the
   * state dir's disk is full); undefined when the row is this process's, free, or stale.
   */
  liveOtherHolder(): LockHolder | undefined {
    const holder = this.holder();
    if (holder === undefined || holder.owner === this.owner) return undefined;
    if (!this.isHolderAlive(holder) || this.isExpired(holder, this.now(), this.hostMonotonic())) return undefined;
    return holder;
  }

  holder(): LockHolder | undefined {
    const row = this.db.prepare(`select ${COLUMNS} from control_link_holder where slot = 1`).get() as Row | undefined;
    return row === undefined ? undefined : holderOf(row);
  }

  close(): void {
    this.db.close();
  }

  /** Not renewed for ttlMs on the host's monotonic clock, or renewed before the host booted. */
  private isExpired(holder: LockHolder, now: number, hostNow: number): boolean {
    // A row an earlier release holds: judged on the wall clock, as that release judges ours.
    if (holder.renewedAtHostMs === null) return now - holder.renewedAt > this.ttlMs;
    return holder.renewedAtHostMs > hostNow || hostNow - holder.renewedAtHostMs > this.ttlMs;
  }

  private defaultAlive(holder: LockHolder): boolean {
    // Only a holder of this pid namespace can be checked by pid; others age out by ttlMs.
    return isMarkedProcessAlive(holder, this.pidNs);
  }
}

const COLUMNS = `owner, pid, pid_ns, start_ticks, acquired_at, renewed_at, ${HOST_CLOCK_COLUMN}`;

/** A lock file an earlier release made lacks the column; replicas starting at once add it once (under the write lock). */
function addHostClockColumn(db: Database.Database): void {
  const has = (): boolean => (db.pragma('table_info(control_link_holder)') as Array<{ name: string }>).some((c) => c.name === HOST_CLOCK_COLUMN);
  if (has()) return;
  db.transaction(() => {
    if (!has()) db.exec(`alter table control_link_holder add column ${HOST_CLOCK_COLUMN} integer`);
  }).immediate();
}

function holderOf(row: Row): LockHolder {
  return {
    owner: row.owner,
    pid: row.pid,
    pidNs: row.pid_ns,
    startTicks: row.start_ticks,
    acquiredAt: row.acquired_at,
    renewedAt: row.renewed_at,
    renewedAtHostMs: row.renewed_host_ms,
  };
}
