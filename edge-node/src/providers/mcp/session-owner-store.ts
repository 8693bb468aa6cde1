/**
 * Where the MCP session bindings live (session-owners.ts decides what they mean). An entry is the
 * 43-char hash of (tool server, session id), never the id itself; its owner is the config's key id.
 * Every store is bounded twice: past a key's own max (maxPerKey), that key's binding used least
 * recently goes, so one key opening sessions in a loop evicts only its own; past the node's max, the
 * bindings used least recently go, whosever they are (a last resort). The node serves from
 * the SQLite store in its state dir (sqlite-session-owner-store.ts), so a restart and the node's
 * replicas keep them; an app built without a state dir (tests, stand-alone nodes) keeps this
 * process's memory store.
 */
import { systemClock } from '../../pipeline/clock.js';
import type { Clock } from '../../pipeline/clock.js';

/**
 * Bindings kept per node. Each is a 43-char hash to the key id string: about 150 bytes, so about
 * 8 MB when full (in memory or in the file).
 */
export const MAX_BOUND_SESSIONS = 50_000;

/**
 * Bindings kept per key. `initialize` is free, so without it one key could fill MAX_BOUND_SESSIONS
 * and push out every other key's sessions. Past it the key's own least recently used session goes
 * (its next call: 404, and the client opens a new one) rather than the initialize being refused: a
 * client that reconnects without DELETE would otherwise be locked out for good, since its stale
 * sessions are never used again to age out. 1 000 is far beyond what one caller keeps open.
 */
export const MAX_BOUND_SESSIONS_PER_KEY = 1_000;

export interface SessionBinding {
  keyId: string;
  /** Unix ms of the last use a store recorded (a store may record it coarsely: see touch). */
  lastUsedMs: number;
}

export interface SessionOwnerStore {
  /** The entry's binding, or undefined. */
  get(entry: string): SessionBinding | undefined;
  /**
   * Binds the entry to `keyId` unless another key holds it (atomically, across every process sharing
   * the store); returns the owner after: `keyId`, or the key that holds it, and `madeAt` when this
   * call made the binding (none held the entry): its last use then. A bound entry becomes the most
   * recently used. A new binding past `keyId`'s maxPerKey drops that key's least recently used one.
   */
  bind(entry: string, keyId: string): BindResult;
  forget(entry: string): void;
  /**
   * Forgets the entry only while it is still `keyId`'s and last used at `lastUsedMs` (bound again or
   * used in a later millisecond, it stays); true when it was forgotten.
   */
  forgetUnused(entry: string, keyId: string, lastUsedMs: number): boolean;
  /** Marks the entry used now. `lastUsedMs` is what get() read: a store whose writes cost may skip a recent one. */
  touch(entry: string, lastUsedMs: number): void;
  /** How many bindings are kept. */
  size(): number;
  close(): void;
}

/** What SessionOwnerStore.bind did. */
export interface BindResult {
  owner: string;
  /** Set when this bind made the binding: its last use then (see forgetUnused). */
  madeAt?: number;
}

export interface MemorySessionOwnerStoreOptions {
  max?: number;
  /** Bindings kept per key (MAX_BOUND_SESSIONS_PER_KEY). */
  maxPerKey?: number;
  clock?: Clock;
}

/**
 * This process's bindings: a Map whose order is the order of last use, and per key a Set of its
 * entries in the same order (so a key's least recently used is found without a scan).
 */
export class MemorySessionOwnerStore implements SessionOwnerStore {
  private readonly owners = new Map<string, SessionBinding>();
  private readonly byKey = new Map<string, Set<string>>();
  private readonly max: number;
  private readonly maxPerKey: number;
  private readonly clock: Clock;

  constructor(opts: MemorySessionOwnerStoreOptions = {}) {
    this.max = Math.max(1, opts.max ?? MAX_BOUND_SESSIONS);
    this.maxPerKey = Math.max(1, opts.maxPerKey ?? MAX_BOUND_SESSIONS_PER_KEY);
    this.clock = opts.clock ?? systemClock;
  }

  get(entry: string): SessionBinding | undefined {
    return this.owners.get(entry);
  }

  bind(entry: string, keyId: string): BindResult {
    const held = this.owners.get(entry);
    if (held !== undefined && held.keyId !== keyId) return { owner: held.keyId };
    const lastUsedMs = this.set(entry, keyId);
    return held === undefined ? { owner: keyId, madeAt: lastUsedMs } : { owner: keyId };
  }

  forget(entry: string): void {
    this.remove(entry);
  }

  forgetUnused(entry: string, keyId: string, lastUsedMs: number): boolean {
    const held = this.owners.get(entry);
    if (held === undefined || held.keyId !== keyId || held.lastUsedMs !== lastUsedMs) return false;
    this.remove(entry);
    return true;
  }

  touch(entry: string): void {
    // Touching is a Map re-insert here: every use counts, so the order is exact.
    const binding = this.owners.get(entry);
    if (binding !== undefined) this.set(entry, binding.keyId);
  }

  size(): number {
    return this.owners.size;
  }

  close(): void {
    this.owners.clear();
    this.byKey.clear();
  }

  /** Sets the binding, last used now; returns that time. */
  private set(entry: string, keyId: string): number {
    const lastUsedMs = this.clock.now();
    // Re-inserted, so the Map's and the key's Set's order is the order of last use.
    this.owners.delete(entry);
    this.owners.set(entry, { keyId, lastUsedMs });
    let entries = this.byKey.get(keyId);
    if (entries === undefined) this.byKey.set(keyId, (entries = new Set()));
    entries.delete(entry);
    entries.add(entry);
    // The key's own cap first: past it, its own oldest goes, never another key's.
    if (entries.size > this.maxPerKey) this.removeOldest(entries.keys());
    if (this.owners.size > this.max) this.removeOldest(this.owners.keys());
    return lastUsedMs;
  }

  private removeOldest(inOrderOfUse: Iterator<string>): void {
    const oldest = inOrderOfUse.next();
    if (oldest.done !== true) this.remove(oldest.value);
  }

  private remove(entry: string): void {
    const held = this.owners.get(entry);
    if (held === undefined) return;
    this.owners.delete(entry);
    const entries = this.byKey.get(held.keyId);
    if (entries !== undefined && entries.delete(entry) && entries.size === 0) this.byKey.delete(held.keyId);
  }
}
