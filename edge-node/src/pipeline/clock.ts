/** Time as the pipeline sees it; tests inject a clock they move by hand (rate limits, leases). */
export interface Clock {
  /** Unix ms. */
  now(): number;
  /** Monotonic ms, for durations. */
  monotonic(): number;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
};
