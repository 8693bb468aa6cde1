/**
 * MCP session bindings in a SQLite file in the node's state dir, so they outlive a restart and every
 * replica of the node enforces the bindings the others made. One row per session: the hash of
 * (tool server, session id) — never the id — its key id and when it was last used. Reads are point
 * reads (WAL: they never wait for a writer). Last use is written at most once a minute per session:
 * the order eviction follows need not be finer.
 * A trigger-kept row count lets each insert evict the least recently used rows past the max without
 * counting the table; before that, the inserting key's own rows past its max go (counted through the
 * (key_id, last_used) index: at most maxPerKey + 1 index entries), so no key evicts another's.
 * synchronous=NORMAL: a power loss may lose the last bindings, whose sessions are then refused to
 * every key (their clients open new ones).
 */
import path from 'node:path';
import type Database from 'better-sqlite3';
import { systemClock } from '../../pipeline/clock.js';
import type { Clock } from '../../pipeline/clock.js';
import { openStateDatabase } from '../../state/state-database.js';
import { MAX_BOUND_SESSIONS, MAX_BOUND_SESSIONS_PER_KEY } from './session-owner-store.js';
import type { BindResult, SessionBinding, SessionOwnerStore } from './session-owner-store.js';

export const SESSION_OWNER_FILE = 'mcp-sessions.sqlite';
/** A use this long after the recorded one is written; closer ones are not (a write per call would queue replicas on the lock). */
export const TOUCH_EVERY_MS = 60_000;
/**
 * How long a write queues for the lock. better-sqlite3 waits synchronously, stalling the node's
 * event loop, and each write holds the lock well under a millisecond: longer waits mean something
 * else holds the file (a backup), and a write that gives up fails closed (see session-owners.ts).
 */
const BUSY_TIMEOUT_MS = 50;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS session_owners (
  entry TEXT PRIMARY KEY,
  key_id TEXT NOT NULL,
  last_used INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS session_owners_by_last_used ON session_owners (last_used);
CREATE INDEX IF NOT EXISTS session_owners_by_key ON session_owners (key_id, last_used);
CREATE TABLE IF NOT EXISTS session_owner_count (
  one INTEGER PRIMARY KEY CHECK (one = 1),
  n INTEGER NOT NULL
);
INSERT OR IGNORE INTO session_owner_count (one, n) SELECT 1, count(*) FROM session_owners;
CREATE TRIGGER IF NOT EXISTS session_owner_added AFTER INSERT ON session_owners
  BEGIN UPDATE session_owner_count SET n = n + 1; END;
CREATE TRIGGER IF NOT EXISTS session_owner_removed AFTER DELETE ON session_owners
  BEGIN UPDATE session_owner_count SET n = n - 1; END;
`;

export interface SqliteSessionOwnerStoreOptions {
  /** The state dir (the file is SESSION_OWNER_FILE in it). */
  stateDir: string;
  max?: number;
  /** Rows kept per key (MAX_BOUND_SESSIONS_PER_KEY); every process sharing the file should pass the same. */
  maxPerKey?: number;
  clock?: Clock;
}

interface BindingRow {
  key_id: string;
  last_used: number;
}

export class SqliteSessionOwnerStore implements SessionOwnerStore {
  readonly file: string;
  private readonly db: Database.Database;
  private readonly max: number;
  private readonly maxPerKey: number;
  private readonly clock: Clock;
  private readonly select: Database.Statement<[string], BindingRow>;
  private readonly insertIfAbsent: Database.Statement<[string, string, number]>;
  private readonly remove: Database.Statement<[string]>;
  private readonly markUsed: Database.Statement<[number, string]>;
  private readonly removeUnused: Database.Statement<[string, string, number]>;
  private readonly evict: Database.Statement<[string, number]>;
  private readonly evictOwn: Database.Statement<[string, string, string, number]>;
  private readonly count: Database.Statement<[], { n: number }>;
  private readonly bindTx: Database.Transaction<(entry: string, keyId: string, now: number) => BindResult>;

  constructor(opts: SqliteSessionOwnerStoreOptions) {
    this.file = path.join(opts.stateDir, SESSION_OWNER_FILE);
    this.max = Math.max(1, opts.max ?? MAX_BOUND_SESSIONS);
    this.maxPerKey = Math.max(1, opts.maxPerKey ?? MAX_BOUND_SESSIONS_PER_KEY);
    this.clock = opts.clock ?? systemClock;
    this.db = openStateDatabase(this.file, { busyTimeoutMs: BUSY_TIMEOUT_MS, synchronous: 'NORMAL', schema: SCHEMA });
    this.select = this.db.prepare('SELECT key_id, last_used FROM session_owners WHERE entry = ?');
    this.insertIfAbsent = this.db.prepare('INSERT INTO session_owners (entry, key_id, last_used) VALUES (?, ?, ?) ON CONFLICT (entry) DO NOTHING');
    this.remove = this.db.prepare('DELETE FROM session_owners WHERE entry = ?');
    this.markUsed = this.db.prepare('UPDATE session_owners SET last_used = max(last_used, ?) WHERE entry = ?');
    this.removeUnused = this.db.prepare('DELETE FROM session_owners WHERE entry = ? AND key_id = ? AND last_used = ?');
    // The row just written is never the one to go, even when the clock gives several rows one time.
    this.evict = this.db.prepare(`DELETE FROM session_owners WHERE entry IN (
      SELECT entry FROM session_owners WHERE entry <> ? ORDER BY last_used
      LIMIT max(0, (SELECT n FROM session_owner_count) - ?))`);
    // The same for the key's own rows, against its own max.
    this.evictOwn = this.db.prepare(`DELETE FROM session_owners WHERE entry IN (
      SELECT entry FROM session_owners WHERE key_id = ? AND entry <> ? ORDER BY last_used
      LIMIT max(0, (SELECT count(*) FROM session_owners WHERE key_id = ?) - ?))`);
    this.count = this.db.prepare('SELECT count(*) AS n FROM session_owners');
    this.bindTx = this.db.transaction((entry: string, keyId: string, now: number) => {
      if (this.insertIfAbsent.run(entry, keyId, now).changes > 0) {
        this.evictOwn.run(keyId, entry, keyId, this.maxPerKey);
        this.evict.run(entry, this.max);
        return { owner: keyId, madeAt: now };
      }
      const owner = this.select.get(entry)!.key_id;
      if (owner === keyId) this.markUsed.run(now, entry);
      return { owner };
    });
  }

  get(entry: string): SessionBinding | undefined {
    const row = this.select.get(entry);
    return row === undefined ? undefined : { keyId: row.key_id, lastUsedMs: row.last_used };
  }

  bind(entry: string, keyId: string): BindResult {
    // IMMEDIATE takes the write lock up front: of two replicas binding one id, exactly one inserts,
    // and the count the eviction reads is the one it changes.
    return this.bindTx.immediate(entry, keyId, this.clock.now());
  }

  forget(entry: string): void {
    this.remove.run(entry);
  }

  forgetUnused(entry: string, keyId: string, lastUsedMs: number): boolean {
    return this.removeUnused.run(entry, keyId, lastUsedMs).changes > 0;
  }

  touch(entry: string, lastUsedMs: number): void {
    const now = this.clock.now();
    if (now - lastUsedMs < TOUCH_EVERY_MS) return;
    this.markUsed.run(now, entry);
  }

  size(): number {
    return this.count.get()!.n;
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
