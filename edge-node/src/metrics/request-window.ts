/**
 * Requests and errors over the last five minutes, for heartbeats: one counter pair per second in a
 * ring, so recording is O(1) and reading sums 300 slots at most once per heartbeat.
 */

const WINDOW_SECONDS = 300;

export interface WindowFigures {
  requests: number;
  errors: number;
}

export class RequestWindow {
  private readonly requests = new Float64Array(WINDOW_SECONDS);
  private readonly errors = new Float64Array(WINDOW_SECONDS);
  /** The second each slot currently counts; a slot from an older second is stale. */
  private readonly slotSecond = new Float64Array(WINDOW_SECONDS).fill(-1);

  constructor(private readonly now: () => number = Date.now) {}

  record(failed: boolean, at = this.now()): void {
    const second = Math.floor(at / 1000);
    const slot = second % WINDOW_SECONDS;
    if (this.slotSecond[slot] !== second) {
      this.slotSecond[slot] = second;
      this.requests[slot] = 0;
      this.errors[slot] = 0;
    }
    this.requests[slot] = (this.requests[slot] ?? 0) + 1;
    if (failed) this.errors[slot] = (this.errors[slot] ?? 0) + 1;
  }

  figures(at = this.now()): WindowFigures {
    const newest = Math.floor(at / 1000);
    let requests = 0;
    let errors = 0;
    for (let slot = 0; slot < WINDOW_SECONDS; slot++) {
      const second = this.slotSecond[slot] ?? -1;
      if (second > newest - WINDOW_SECONDS && second <= newest) {
        requests += this.requests[slot] ?? 0;
        errors += this.errors[slot] ?? 0;
      }
    }
    return { requests, errors };
  }
}
