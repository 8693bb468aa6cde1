/**
 * The sliding-window arithmetic shared by every limit store: a limit per minute is checked against
 * the current minute's count plus the previous minute's count weighted by how much of it still
 * overlaps the last 60 s. Exact enough (errs by at most the previous minute's unevenness), and
 * costs two counters per subject and metric. Pure functions: stores read counts, call these, write.
 *
 * A minute's count may exceed the limit: usage a token true-up adds beyond the admission estimate.
 * That excess is debt: when the minute ends, it counts as the previous minute for at most the limit
 * and the rest moves on as the next minute's count, minute after minute, so sustained use settles
 * at about the limit instead of being forgotten within two minutes. A minute holds at most
 * MAX_DEBT_MINUTES limits' worth: a huge single answer holds its key out for at most that long.
 */

export const WINDOW_MS = 60_000;

/** The most minutes usage beyond the limit is carried for (docs/node-api.md "Rate limits"). */
export const MAX_DEBT_MINUTES = 10;

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
  /** Charged in the current minute (with debt carried into it). */
  cur: number;
}

const EMPTY: WindowCounts = { prev: 0, cur: 0 };

export function minuteOf(nowMs: number): number {
  return Math.floor(nowMs / WINDOW_MS);
}

/** The most one minute's count may hold under `limit`: the current minute and the debt it carries. */
export function minuteCap(limit: number): number {
  return Math.max(0, limit) * MAX_DEBT_MINUTES;
}

/**
 * The counts `minutes` (>= 0) whole minutes later if nothing more is charged: each minute that ends
 * becomes the previous one holding at most `limit`, and what it held beyond that is the next
 * minute's count. Capped at minuteCap first (a limit lowered since the debt was made).
 */
export function rolled(counts: WindowCounts, minutes: number, limit: number): WindowCounts {
  const cap = minuteCap(limit);
  let { prev, cur } = counts;
  if (cur > cap) cur = cap;
  // After MAX_DEBT_MINUTES + 1 minutes even a full cap has been counted and has decayed.
  if (minutes > MAX_DEBT_MINUTES) return EMPTY;
  for (let step = 0; step < minutes; step++) {
    if (prev === 0 && cur === 0) break;
    prev = Math.min(cur, limit);
    cur = Math.max(0, cur - limit);
  }
  return { prev, cur };
}

/** How much of the last 60 s is used at `nowMs`. */
export function windowUsage(counts: WindowCounts, nowMs: number): number {
  const intoMinute = (nowMs - minuteOf(nowMs) * WINDOW_MS) / WINDOW_MS;
  return counts.prev * (1 - intoMinute) + counts.cur;
}

/**
 * What a request is charged against a limit on admission: never more than the limit, so a large
 * estimate without an explicit output cap is not refused forever (what it really uses is trued up
 * afterwards; an explicit cap above the limit is refused before this: node-rate-limiter.ts).
 */
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
 * Ms from `nowMs` until `charge` (<= limit) would fit, if nothing else is charged meanwhile: minute
 * by minute, once the minute's own count (debt included) leaves room, the previous minute's share
 * decays through it until the charge fits.
 */
export function msUntilFits(counts: WindowCounts, charge: number, limit: number, nowMs: number): number {
  if (fits(counts, charge, limit, nowMs)) return 0;
  const minuteStart = minuteOf(nowMs) * WINDOW_MS;
  const room = limit - charge;
  let at = rolled(counts, 0, limit);
  // Bounded: after MAX_DEBT_MINUTES minutes a minute holds no debt, and a charge <= limit fits
  // within the minute after that.
  for (let minute = 0; minute <= MAX_DEBT_MINUTES + 1; minute++) {
    if (at.cur <= room) {
      // prev * (1 - f) + cur <= room from f on.
      const f = at.prev > 0 ? Math.max(0, 1 - (room - at.cur) / at.prev) : 0;
      if (f < 1) return Math.max(0, minuteStart + (minute + f) * WINDOW_MS - nowMs);
    }
    at = rolled(at, 1, limit);
  }
  return minuteStart + (MAX_DEBT_MINUTES + 2) * WINDOW_MS - nowMs;
}

/** Ms from `nowMs` until the window is empty again if nothing more is charged (debt included). */
export function msUntilEmpty(counts: WindowCounts, limit: number, nowMs: number): number {
  let at = rolled(counts, 0, limit);
  let minutes = 0;
  while ((at.prev > 0 || at.cur > 0) && minutes <= MAX_DEBT_MINUTES + 1) {
    at = rolled(at, 1, limit);
    minutes++;
  }
  return minutes === 0 ? 0 : minuteOf(nowMs) * WINDOW_MS + minutes * WINDOW_MS - nowMs;
}
