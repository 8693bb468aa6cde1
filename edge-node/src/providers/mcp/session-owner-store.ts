/**
 * Where the MCP session bindings live (session-owners.ts decides what they mean). An entry is the
 * 43-char hash of (tool server, session id), never the id itself; its owner is the config's key id.
 * Every store is bounded: past its max, the bindings used least recently go. The node serves from
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
   * recently used.
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
  clock?: Clock;
}

/** This process's bindings: a Map whose order is the order of last use. */
export class MemorySessionOwnerStore implements SessionOwnerStore {
  private readonly owners = new Map<string, SessionBinding>();
  private readonly max: number;
  private readonly clock: Clock;

  constructor(opts: MemorySessionOwnerStoreOptions = {}) {
    this.max = Math.max(1, opts.max ?? MAX_BOUND_SESSIONS);
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
    this.owners.delete(entry);
  }

  forgetUnused(entry: string, keyId: string, lastUsedMs: number): boolean {
    const held = this.owners.get(entry);
    if (held === undefined || held.keyId !== keyId || held.lastUsedMs !== lastUsedMs) return false;
    this.owners.delete(entry);
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
  }

  /** Sets the binding, last used now; returns that time. */
  private set(entry: string, keyId: string): number {
    const lastUsedMs = this.clock.now();
    // Re-inserted, so the Map's order is the order of last use.
    this.owners.delete(entry);
    this.owners.set(entry, { keyId, lastUsedMs });
    if (this.owners.size > this.max) {
      const oldest = this.owners.keys().next();
      if (oldest.done !== true) this.owners.delete(oldest.value);
    }
    return lastUsedMs;
  }
}
