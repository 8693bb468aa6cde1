/**
 * Where the limiter keeps its counters. Two implementations: memory (one process, stand-alone) and
 * SQLite in the state dir (every replica of the node opens the same file). Each `admit` is one
 * atomic step: read the counters, decide with sliding-window.ts, and charge only when everything fits.
 */
import type { WindowCounts } from './sliding-window.js';

export type RateMetric = 'requests' | 'tokens';

/** One per-minute limit to check, e.g. the key's requests/min. */
export interface RateCheck {
  /** `key:<id>` or `account:<id>`. */
  subject: string;
  metric: RateMetric;
  limit: number;
  /** What admitting charges (already capped at the limit). */
  charge: number;
}

/** One concurrency limit to check. */
export interface SlotCheck {
  subject: string;
  limit: number;
}

/**
 * A slot taken, whatever the limit, for a request already in flight that holds none for `subject`
 * (admitted before its config set a concurrency limit there): released with `release(slotId)`.
 */
export interface SlotAdoption {
  slotId: string;
  subject: string;
}

export interface AdmitQuery {
  nowMs: number;
  rates: readonly RateCheck[];
  slots: readonly SlotCheck[];
  /** Names the slot held on admission (released with `release`). */
  slotId: string;
  /** Taken first, in the same atomic step, admitted or not, so the checks count them. */
  adopt: readonly SlotAdoption[];
}

export interface AdmitOutcome {
  admitted: boolean;
  /**
   * The counters as they were before this request was charged, aligned with `rates`: one for every
   * check, also those after the first that did not fit (Retry-After is the longest wait of all).
   */
  windows: WindowCounts[];
  /** The first rate check that did not fit (index in `rates`), or -1. */
  failedRate: number;
  /** The first concurrency check that did not fit (index in `slots`), or -1. */
  failedSlot: number;
  /**
   * The minute each rate check was charged in, aligned with `rates`, when not the minute of `nowMs`
   * (after the wall clock stepped back across a minute boundary, the newer minute already written
   * is charged): a true-up must change that minute.
   */
  chargedMinutes?: readonly number[];
}

/** One change to a window after admission (the token true-up). */
export interface WindowChange {
  subject: string;
  metric: RateMetric;
  minute: number;
  /**
   * > 0: added to the window of `minute`, which is created if need be (usage is never dropped).
   * < 0: given back from that window if it is still kept (never below 0); a window no check reads
   * any more has nothing left to give back.
   */
  delta: number;
}

export interface LimitStore {
  admit(query: AdmitQuery): AdmitOutcome;
  /** Applies the changes together. A store that cannot write now keeps them and writes them later. */
  change(changes: readonly WindowChange[]): void;
  /** Frees the concurrency slots held under `slotId`; a store that cannot write now frees them later. */
  release(slotId: string): void;
  close(): void;
}
