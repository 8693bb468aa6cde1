/** Time as the pipeline sees it; tests inject a clock they move by hand (rate limits, leases). */
export interface Clock {
  /** Unix ms. */
  now(): number;
  /** Monotonic ms, for durations. */
  monotonic(): number;
  /**
   * The host's CLOCK_MONOTONIC in whole ms: one count for every process on the host (in one time
   * namespace), never stepped with the wall clock (NTP, a hand-set date, a VM resume), so leases
   * that processes on one host read and write in a shared file keep their length whatever the wall
   * clock does. Starts again near 0 at boot. (`monotonic()` counts from this process's start.)
   */
  hostMonotonic(): number;
  /**
   * Unix ms on the control plane's clock, for times the control plane set (API-key expiry, credit
   * lease expiry): this host's wall clock may have drifted since enrollment. Absent: `now()`.
   */
  controlPlaneNow?(): number;
}

/** The control plane's time as `clock` knows it; the wall clock when it knows none. */
export function controlPlaneNow(clock: Clock): number {
  return clock.controlPlaneNow !== undefined ? clock.controlPlaneNow() : clock.now();
}

export const systemClock: Clock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
  // process.hrtime reads CLOCK_MONOTONIC itself; performance.now() is offset by the process's start.
  hostMonotonic: () => Number(process.hrtime.bigint() / 1_000_000n),
};
