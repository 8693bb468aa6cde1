/**
 * Enrollment attempts per client IP: a fixed one-minute window in memory. Every attempt counts, a
 * successful one too, so guessing tokens costs a minute per few tries. Per replica, which is enough
 * against guessing 256-bit tokens; the point is to make noise cheap to stop, not to be exact.
 * The console's failed logins use the same windows (console-sessions.ts), counting failures only.
 */

export type RateLimitDecision = { allowed: true } | { allowed: false; retryAfterSeconds: number };

interface Window { startedAtMs: number; count: number }

export interface FixedWindowRateLimiterOptions {
  limit: number;
  windowMs: number;
  /** Bound on remembered clients, so a flood of source addresses cannot grow memory without end. */
  maxKeys?: number;
}

const DEFAULT_MAX_KEYS = 10_000;

export class FixedWindowRateLimiter {
  private readonly windows = new Map<string, Window>();
  private readonly limit: number;
  private readonly windowMs: number;
  private readonly maxKeys: number;

  constructor(opts: FixedWindowRateLimiterOptions) {
    this.limit = opts.limit;
    this.windowMs = opts.windowMs;
    this.maxKeys = opts.maxKeys ?? DEFAULT_MAX_KEYS;
  }

  /** Whether `key` may proceed, without counting anything (a caller that counts only failures). */
  peek(key: string, nowMs: number = Date.now()): RateLimitDecision {
    const window = this.windows.get(key);
    if (!window || nowMs - window.startedAtMs >= this.windowMs || window.count < this.limit) return { allowed: true };
    return { allowed: false, retryAfterSeconds: Math.max(1, Math.ceil((window.startedAtMs + this.windowMs - nowMs) / 1000)) };
  }

  /** Counts one attempt by `key` and says whether it may proceed. */
  hit(key: string, nowMs: number = Date.now()): RateLimitDecision {
    let window = this.windows.get(key);
    if (!window || nowMs - window.startedAtMs >= this.windowMs) {
      this.windows.delete(key);
      this.makeRoom(nowMs);
      window = { startedAtMs: nowMs, count: 0 };
      // Re-inserted, so the map stays ordered by window start (oldest first).
      this.windows.set(key, window);
    }
    window.count += 1;
    if (window.count <= this.limit) return { allowed: true };
    const retryAfterMs = window.startedAtMs + this.windowMs - nowMs;
    return { allowed: false, retryAfterSeconds: Math.max(1, Math.ceil(retryAfterMs / 1000)) };
  }

  private makeRoom(nowMs: number): void {
    if (this.windows.size < this.maxKeys) return;
    // The map is ordered by window start: finished windows come first. Drop those; if the map is
    // still full, drop the oldest running ones (that client merely gets a fresh window).
    for (const [key, window] of this.windows) {
      const finished = nowMs - window.startedAtMs >= this.windowMs;
      if (!finished && this.windows.size < this.maxKeys) return;
      this.windows.delete(key);
    }
  }
}
