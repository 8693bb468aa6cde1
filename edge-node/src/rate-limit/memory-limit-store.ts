// Counters in this process only: a stand-alone node (no state dir), and tests.
import type { AdmitOutcome, AdmitQuery, LimitStore, RateMetric, WindowChange } from './limit-store.js';
import { fits, minuteOf } from './sliding-window.js';
import type { WindowCounts } from './sliding-window.js';

interface Window {
  minute: number;
  prev: number;
  cur: number;
}

/** A subject's windows by metric: no key string is built per check on the hot path. */
type SubjectWindows = Partial<Record<RateMetric, Window>>;

export class MemoryLimitStore implements LimitStore {
  private readonly windows = new Map<string, SubjectWindows>();
  private readonly inUse = new Map<string, number>();
  private readonly held = new Map<string, readonly string[]>();
  private prunedMinute = Number.NEGATIVE_INFINITY;

  admit(query: AdmitQuery): AdmitOutcome {
    const minute = minuteOf(query.nowMs);
    if (minute > this.prunedMinute) this.prune(minute);
    for (const { slotId, subject } of query.adopt) {
      this.inUse.set(subject, (this.inUse.get(subject) ?? 0) + 1);
      this.held.set(slotId, [subject]);
    }
    const windows: WindowCounts[] = [];
    let failedRate = -1;
    // Every check is read, also after one did not fit: the limiter's Retry-After needs them all.
    for (let index = 0; index < query.rates.length; index++) {
      const check = query.rates[index]!;
      const window = this.windows.get(check.subject)?.[check.metric];
      let counts: WindowCounts;
      if (window === undefined) counts = { prev: 0, cur: 0 };
      else {
        this.roll(window, minute);
        counts = { prev: window.prev, cur: window.cur };
      }
      windows.push(counts);
      if (failedRate < 0 && !fits(counts, check.charge, check.limit, query.nowMs)) failedRate = index;
    }
    let failedSlot = -1;
    for (let index = 0; index < query.slots.length; index++) {
      const check = query.slots[index]!;
      if ((this.inUse.get(check.subject) ?? 0) >= check.limit) {
        failedSlot = index;
        break;
      }
    }
    const admitted = failedRate < 0 && failedSlot < 0;
    if (admitted) {
      for (const check of query.rates) this.add(check.subject, check.metric, minute, check.charge);
      if (query.slots.length > 0) {
        const subjects = query.slots.map((s) => s.subject);
        for (const subject of subjects) this.inUse.set(subject, (this.inUse.get(subject) ?? 0) + 1);
        this.held.set(query.slotId, subjects);
      }
    }
    return { admitted, windows, failedRate, failedSlot };
  }

  change(changes: readonly WindowChange[]): void {
    for (const { subject, metric, minute, delta } of changes) {
      if (delta > 0) {
        this.add(subject, metric, minute, delta);
        continue;
      }
      const window = this.windows.get(subject)?.[metric];
      if (window === undefined || delta === 0) continue;
      // The window's minute earlier than the charge's: the wall clock stepped back since, and roll
      // took the counts as the window's minute's, so the true-up goes there too.
      if (window.minute <= minute) window.cur = Math.max(0, window.cur + delta);
      else if (window.minute === minute + 1) window.prev = Math.max(0, window.prev + delta);
    }
  }

  release(slotId: string): void {
    const subjects = this.held.get(slotId);
    if (subjects === undefined) return;
    this.held.delete(slotId);
    for (const subject of subjects) {
      // Deleted at 0, so the map follows the requests in flight, not every key ever limited.
      const left = (this.inUse.get(subject) ?? 0) - 1;
      if (left > 0) this.inUse.set(subject, left);
      else this.inUse.delete(subject);
    }
  }

  /** Subjects with a live window (tests check that idle ones are forgotten). */
  trackedSubjects(): number {
    return this.windows.size;
  }

  /** Subjects with a request in flight (tests check that finished ones are forgotten). */
  subjectsInFlight(): number {
    return this.inUse.size;
  }

  close(): void {
    this.windows.clear();
    this.inUse.clear();
    this.held.clear();
  }

  /** Once a minute: windows no check can read any more go, so memory follows the active keys. */
  private prune(minute: number): void {
    this.prunedMinute = minute;
    for (const [subject, byMetric] of this.windows) {
      let live = false;
      for (const metric of Object.keys(byMetric) as RateMetric[]) {
        const window = byMetric[metric];
        if (window === undefined) continue;
        // Set, not deleted: the object keeps its shape for the lookups on the hot path.
        if (window.minute < minute - 1) byMetric[metric] = undefined;
        else live = true;
      }
      if (!live) this.windows.delete(subject);
    }
  }

  private add(subject: string, metric: RateMetric, minute: number, amount: number): void {
    let byMetric = this.windows.get(subject);
    if (byMetric === undefined) {
      byMetric = {};
      this.windows.set(subject, byMetric);
    }
    let window = byMetric[metric];
    if (window === undefined) {
      window = { minute, prev: 0, cur: 0 };
      byMetric[metric] = window;
    }
    // A minute older than the window's (the wall clock stepped back, or a request whose clock lags
    // the last admission's) counts as the window's current minute: added late rather than dropped.
    this.roll(window, minute);
    window.cur += amount;
  }

  /**
   * The window moved to `minute`. Forward: a window two minutes old is empty. Back (the wall clock
   * stepped back): the counts are taken as `minute`'s, so none is lost and none outlives a normal
   * window (kept at their later minute, a step of an hour held them, and refused callers, for the hour).
   */
  private roll(window: Window, minute: number): void {
    if (window.minute === minute) return;
    if (window.minute < minute) {
      window.prev = window.minute === minute - 1 ? window.cur : 0;
      window.cur = 0;
    }
    window.minute = minute;
  }
}
