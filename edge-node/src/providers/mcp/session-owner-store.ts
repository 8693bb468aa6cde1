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
   * the store); returns the owner after: `keyId`, or the key that holds it. A bound entry becomes the
   * most recently used.
   */
  bind(entry: string, keyId: string): string;
  forget(entry: string): void;
  /** Marks the entry used now. `lastUsedMs` is what get() read: a store whose writes cost may skip a recent one. */
  touch(entry: string, lastUsedMs: number): void;
  /** How many bindings are kept. */
  size(): number;
  close(): void;
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

  bind(entry: string, keyId: string): string {
    const owner = this.owners.get(entry)?.keyId;
    if (owner !== undefined && owner !== keyId) return owner;
    this.set(entry, keyId);
    return keyId;
  }

  forget(entry: string): void {
    this.owners.delete(entry);
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

  private set(entry: string, keyId: string): void {
    // Re-inserted, so the Map's order is the order of last use.
    this.owners.delete(entry);
    this.owners.set(entry, { keyId, lastUsedMs: this.clock.now() });
    if (this.owners.size > this.max) {
      const oldest = this.owners.keys().next();
      if (oldest.done !== true) this.owners.delete(oldest.value);
    }
  }
}
