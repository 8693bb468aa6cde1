/**
 * The sliding-window arithmetic shared by every limit store: a limit per minute is checked against
 * the current minute's count plus the previous minute's count weighted by how much of it still
 * overlaps the last 60 s. Exact enough (errs by at most the previous minute's unevenness), and
 * costs two counters per subject and metric. Pure functions: stores read counts, call these, write.
 */

export const WINDOW_MS = 60_000;

/**
 * Slack for floating-point rounding in the previous minute's weighted share: a retry sent exactly
 * at the computed wait must fit (counts are whole requests and tokens, so a billionth never admits
 * a request that does not).
 */
const ROUNDING_SLACK = 1e-9;

/** The counts a store holds for one subject and metric. */
export interface WindowCounts {
  /** Charged in the previous minute. */
  prev: number;
  /** Charged in the current minute. */
  cur: number;
}

export function minuteOf(nowMs: number): number {
  return Math.floor(nowMs / WINDOW_MS);
}

/** How much of the last 60 s is used at `nowMs`. */
export function windowUsage(counts: WindowCounts, nowMs: number): number {
  const intoMinute = (nowMs - minuteOf(nowMs) * WINDOW_MS) / WINDOW_MS;
  return counts.prev * (1 - intoMinute) + counts.cur;
}

/** What a request is charged against a limit: never more than the limit, so a huge estimate is not refused forever. */
export function chargeFor(cost: number, limit: number): number {
  return Math.min(Math.max(0, cost), limit);
}

/**
 * Whether charging `charge` now keeps the window within `limit`. A charge of 0 always fits: a
 * request that costs nothing of this metric (GET /v1/models against tokens/min) adds nothing to a
 * full window, so the full window does not refuse it (its other limits still apply).
 */
export function fits(counts: WindowCounts, charge: number, limit: number, nowMs: number): boolean {
  if (charge <= 0) return true;
  return windowUsage(counts, nowMs) + charge <= limit + ROUNDING_SLACK * Math.max(1, limit);
}

/**
 * Ms from `nowMs` until `charge` would fit, if nothing else is charged meanwhile: first the
 * previous minute's share decays through the current minute, then the current minute's count
 * decays through the next one.
 */
export function msUntilFits(counts: WindowCounts, charge: number, limit: number, nowMs: number): number {
  if (fits(counts, charge, limit, nowMs)) return 0;
  const minuteStart = minuteOf(nowMs) * WINDOW_MS;
  const room = limit - charge;
  // Within this minute: prev * (1 - f) + cur <= room.
  if (counts.prev > 0 && room - counts.cur >= 0) {
    const f = 1 - (room - counts.cur) / counts.prev;
    const at = minuteStart + f * WINDOW_MS;
    if (at < minuteStart + WINDOW_MS) return Math.max(0, at - nowMs);
  }
  // In the next minute: cur * (1 - g) <= room (charge <= limit, so g <= 1).
  const g = counts.cur > 0 ? Math.max(0, 1 - room / counts.cur) : 0;
  return Math.max(0, minuteStart + WINDOW_MS + g * WINDOW_MS - nowMs);
}

/** Ms from `nowMs` until the window is empty again if nothing more is charged. */
export function msUntilEmpty(counts: WindowCounts, nowMs: number): number {
  const minuteStart = minuteOf(nowMs) * WINDOW_MS;
  if (counts.cur > 0) return minuteStart + 2 * WINDOW_MS - nowMs;
  if (counts.prev > 0) return minuteStart + WINDOW_MS - nowMs;
  return 0;
}
