/**
 * One live session's lease refresh (lease-stream-handler.ts): run every refresh interval and soon
 * after a wake (a credit top-up or a config change on any replica), never two at once and woken
 * ones at most once a second. A wake that comes while a refresh runs may have come after that
 * refresh read the account, so it runs once more afterwards; an interval tick during a refresh is
 * simply skipped (the next tick comes anyway).
 */

/**
 * How long a wake waits before refreshing: the top-ups and config changes of one admin script
 * arrive within it and cost one refresh per live session, not one each.
 */
export const WAKE_COALESCE_MS = 100;

/**
 * Woken refreshes start at least this far apart: an admin script's changes a few hundred ms apart
 * would otherwise have every live session take its accounts' balance locks many times a second.
 */
export const WAKE_MIN_GAP_MS = 1_000;

export class LeaseRefresher {
  /** True from construction: the session's first grant is under way (`firstDone` ends it). */
  private running = true;
  private again = false;
  private stopped = false;
  private soon: NodeJS.Timeout | undefined;
  private readonly timer: NodeJS.Timeout;
  /** When the last refresh started (the first grant: at construction). */
  private lastStartedAt = Date.now();

  constructor(
    private readonly refresh: () => Promise<void>,
    intervalMs: number,
    private readonly onError: (err: unknown) => void,
  ) {
    this.timer = setInterval(() => this.run(false), intervalMs);
    this.timer.unref();
  }

  /** The session's first grant (made by the caller) has ended. */
  firstDone(): void {
    this.finished();
  }

  /**
   * Refresh within WAKE_COALESCE_MS, or WAKE_MIN_GAP_MS after the last refresh started if that is
   * later; wakes meanwhile share that refresh.
   */
  wake(): void {
    if (this.stopped || this.soon !== undefined) return;
    const delay = Math.max(WAKE_COALESCE_MS, this.lastStartedAt + WAKE_MIN_GAP_MS - Date.now());
    this.soon = setTimeout(() => {
      this.soon = undefined;
      this.run(true);
    }, delay);
    this.soon.unref();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
    clearTimeout(this.soon);
  }

  private run(woken: boolean): void {
    if (this.stopped) return;
    if (this.running) {
      if (woken) this.again = true;
      return;
    }
    this.running = true;
    this.lastStartedAt = Date.now();
    this.refresh()
      .catch(this.onError)
      .finally(() => this.finished());
  }

  private finished(): void {
    this.running = false;
    if (!this.again) return;
    this.again = false;
    // Once more for the wake it ran through, as any wake: not before the gap.
    this.wake();
  }
}
