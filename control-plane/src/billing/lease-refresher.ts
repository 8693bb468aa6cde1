/**
 * One live session's lease refresh (lease-stream-handler.ts): run every refresh interval and soon
 * after a wake (a credit top-up or a config change on any replica), never two at once. A wake that
 * comes while a refresh runs may have come after that refresh read the account, so it runs once
 * more afterwards; an interval tick during a refresh is simply skipped (the next tick comes anyway).
 */

/**
 * How long a wake waits before refreshing: the top-ups and config changes of one admin script
 * arrive within it and cost one refresh per live session, not one each.
 */
export const WAKE_COALESCE_MS = 100;

export class LeaseRefresher {
  /** True from construction: the session's first grant is under way (`firstDone` ends it). */
  private running = true;
  private again = false;
  private stopped = false;
  private soon: NodeJS.Timeout | undefined;
  private readonly timer: NodeJS.Timeout;

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

  /** Refresh within WAKE_COALESCE_MS; wakes meanwhile share that refresh. */
  wake(): void {
    if (this.stopped || this.soon !== undefined) return;
    this.soon = setTimeout(() => {
      this.soon = undefined;
      this.run(true);
    }, WAKE_COALESCE_MS);
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
    this.refresh()
      .catch(this.onError)
      .finally(() => this.finished());
  }

  private finished(): void {
    this.running = false;
    if (!this.again) return;
    this.again = false;
    this.run(true);
  }
}
