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
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import type Database from 'better-sqlite3';
import { isMarkedProcessAlive, pidNamespace, processStartTicks } from '../process-alive.js';
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

export interface LockHolder {
  owner: string;
  pid: number;
  pidNs: string | null;
  startTicks: string | null;
  acquiredAt: number;
  renewedAt: number;
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
}

export interface ControlLinkLockOptions {
  ttlMs?: number;
  now?: () => number;
  /** Tests: the liveness check of another process (default: signal 0 and /proc start time). */
  isHolderAlive?: (holder: LockHolder) => boolean;
}

export class ControlLinkLock {
  readonly owner = randomUUID();
  readonly file: string;
  private readonly db: Database.Database;
  private readonly ttlMs: number;
  private readonly now: () => number;
  private readonly pidNs = pidNamespace();
  private readonly startTicks = processStartTicks(process.pid);
  private readonly isHolderAlive: (holder: LockHolder) => boolean;

  constructor(stateDir: string, opts: ControlLinkLockOptions = {}) {
    this.file = path.join(stateDir, CONTROL_LINK_LOCK_FILE);
    // A short busy wait: these calls are synchronous, and a tick that finds the file busy just tries again later.
    this.db = openStateDatabase(this.file, { busyTimeoutMs: 200, synchronous: 'NORMAL', schema: SCHEMA });
    this.ttlMs = opts.ttlMs ?? DEFAULT_LOCK_TTL_MS;
    this.now = opts.now ?? Date.now;
    this.isHolderAlive = opts.isHolderAlive ?? ((holder) => this.defaultAlive(holder));
  }

  /** Takes the lock when free or stale, renews it when held; never waits for a live holder. */
  tryAcquire(): AcquireResult {
    const run = this.db.transaction((): AcquireResult => {
      const row = this.db.prepare('select owner, pid, pid_ns, start_ticks, acquired_at, renewed_at from control_link_holder where slot = 1').get() as Row | undefined;
      const now = this.now();
      if (row !== undefined && row.owner === this.owner) {
        this.db.prepare('update control_link_holder set renewed_at = ? where slot = 1').run(now);
        return { outcome: 'held' };
      }
      let why: 'free' | 'holder-dead' | 'holder-expired' = 'free';
      const holder = row === undefined ? undefined : holderOf(row);
      if (holder !== undefined) {
        if (!this.isHolderAlive(holder)) why = 'holder-dead';
        // A renewal "in the future" (the clock went back) counts as fresh.
        else if (now - holder.renewedAt > this.ttlMs) why = 'holder-expired';
        else return { outcome: 'busy', holder };
      }
      this.db
        .prepare('insert or replace into control_link_holder (slot, owner, pid, pid_ns, start_ticks, acquired_at, renewed_at) values (1, ?, ?, ?, ?, ?, ?)')
        .run(this.owner, process.pid, this.pidNs, this.startTicks, now, now);
      return { outcome: 'acquired', tookOverFrom: holder, why };
    });
    return run.immediate();
  }

  /** Renews a held lock; false when another process holds it now (this one must stop its link). */
  renew(): boolean {
    return this.db.prepare('update control_link_holder set renewed_at = ? where slot = 1 and owner = ?').run(this.now(), this.owner).changes === 1;
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
    if (!this.isHolderAlive(holder) || this.now() - holder.renewedAt > this.ttlMs) return undefined;
    return holder;
  }

  holder(): LockHolder | undefined {
    const row = this.db.prepare('select owner, pid, pid_ns, start_ticks, acquired_at, renewed_at from control_link_holder where slot = 1').get() as Row | undefined;
    return row === undefined ? undefined : holderOf(row);
  }

  close(): void {
    this.db.close();
  }

  private defaultAlive(holder: LockHolder): boolean {
    // Only a holder of this pid namespace can be checked by pid; others age out by ttlMs.
    return isMarkedProcessAlive(holder, this.pidNs);
  }
}

function holderOf(row: Row): LockHolder {
  return { owner: row.owner, pid: row.pid, pidNs: row.pid_ns, startTicks: row.start_ticks, acquiredAt: row.acquired_at, renewedAt: row.renewed_at };
}
