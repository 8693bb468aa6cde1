/**
 * The config the node serves right now, swapped atomically. Each request takes one snapshot when
 * it arrives and keeps it to the end, so a swap never changes a request in flight: it finishes on
 * the config it started with, and the next request sees the new one.
 */
import type { RuntimeConfig } from './runtime-config.js';

export type ConfigSnapshot =
  | {
      readonly ready: true;
      readonly config: RuntimeConfig;
      readonly appliedAt: Date;
      /**
       * Set while the node serves previous.json because current.json was damaged: the highest
       * version the node applied, which this config is older than (for /readyz and status).
       */
      readonly olderThanApplied?: number;
    }
  | {
      readonly ready: false;
      /** Why there is no config, for /readyz and status; names no absolute path or secret. */
      readonly reason: string;
    };

export type SwapListener = (snapshot: Extract<ConfigSnapshot, { ready: true }>) => void;

export class ConfigHolder {
  private snapshot: ConfigSnapshot;
  private readonly listeners = new Set<SwapListener>();

  constructor(initial: ConfigSnapshot) {
    this.snapshot = initial;
  }

  static ready(config: RuntimeConfig, appliedAt = new Date(), olderThanApplied?: number): ConfigHolder {
    return new ConfigHolder({ ready: true, config, appliedAt, ...(olderThanApplied !== undefined ? { olderThanApplied } : {}) });
  }

  static notReady(reason: string): ConfigHolder {
    return new ConfigHolder({ ready: false, reason });
  }

  /** The current snapshot: a request reads this once and keeps it. */
  current(): ConfigSnapshot {
    return this.snapshot;
  }

  /**
   * The served bundle version, 0 when none (a local file or nothing yet). Hello and heartbeats carry
   * the config applier's servedVersion() instead, which also counts a previous enrollment's config as none.
   */
  appliedVersion(): number {
    return this.snapshot.ready ? (this.snapshot.config.version ?? 0) : 0;
  }

  /** Replaces the config in one assignment (clearing olderThanApplied); requests already running keep theirs. */
  swap(config: RuntimeConfig, appliedAt = new Date()): void {
    const next = { ready: true as const, config, appliedAt };
    this.snapshot = next;
    for (const listener of this.listeners) listener(next);
  }

  /** Called after every swap; returns the unsubscribe function. */
  onSwap(listener: SwapListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
