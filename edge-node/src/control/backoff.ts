/**
 * Reconnect delays: exponential with full jitter (a random delay between 0 and the current step),
 * so a fleet that lost its control plane at the same moment does not come back in lock-step.
 */

export interface BackoffOptions {
  /** The first step. */
  baseMs: number;
  /** The largest step. */
  maxMs: number;
  /** In [0, 1); Math.random by default. */
  random?: () => number;
}

// 2^30 steps overflow nothing and exceed any sensible cap.
const MAX_EXPONENT = 30;

export class Backoff {
  private attempt = 0;
  private readonly random: () => number;

  constructor(private readonly opts: BackoffOptions) {
    if (!(opts.baseMs > 0) || !(opts.maxMs >= opts.baseMs)) throw new Error('backoff needs 0 < baseMs <= maxMs');
    this.random = opts.random ?? Math.random;
  }

  /** The current step's ceiling: base·2^attempts, capped. */
  ceiling(): number {
    return Math.min(this.opts.maxMs, this.opts.baseMs * 2 ** Math.min(this.attempt, MAX_EXPONENT));
  }

  /** The next delay, and one step up. */
  next(): number {
    const delay = Math.floor(this.random() * this.ceiling());
    this.attempt += 1;
    return delay;
  }

  /** After a healthy session: start again from the first step. */
  reset(): void {
    this.attempt = 0;
  }

  get attempts(): number {
    return this.attempt;
  }
}
