/**
 * The control plane's time as this node knows it. Expiries the control plane sets (API keys,
 * credit leases) are judged by its clock, not this host's: a host clock that drifted after
 * enrollment would otherwise accept keys the control plane has expired, or refuse valid ones.
 * Each HelloAck's server_time (moved on by half the hello's round trip) is an anchor kept with the
 * host's monotonic clock at that moment, so "control-plane now" is the anchor plus monotonic time
 * elapsed: a later step of the wall clock changes nothing, and the anchor holds while offline.
 * Before the first HelloAck of a process (a restart without a control plane) there is no anchor
 * and the host's wall clock is used, as before enrollment's own check.
 */
import { readFileSync } from 'node:fs';
import { systemClock } from '../pipeline/clock.js';
import type { Clock } from '../pipeline/clock.js';

/** DESIGN §7 (and enrollment's check): a host clock further off than this cannot be trusted with expiries. */
export const MAX_CLOCK_SKEW_MS = 30_000;

/** The control plane's time at one moment of the host's monotonic clock. */
export interface ControlPlaneAnchor {
  controlPlaneMs: number;
  /** Clock.hostMonotonic() at that moment: shared by every process on the host until it reboots. */
  hostMonotonicMs: number;
  /**
   * The kernel's boot id then: the monotonic clock starts again at boot and soon passes any earlier
   * reading, so only the boot id tells an anchor from before a reboot. Absent (older file, or no
   * /proc): such an anchor is only taken while its reading is not ahead of the clock.
   */
  bootId?: string;
}

let cachedBootId: string | null | undefined;

/** This boot's id (/proc/sys/kernel/random/boot_id); null where the kernel does not say. */
export function currentBootId(): string | null {
  if (cachedBootId === undefined) {
    try {
      cachedBootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || null;
    } catch {
      cachedBootId = null;
    }
  }
  return cachedBootId;
}

/** Whether `anchor` was taken during this boot of the host (so its monotonic reading still applies). */
export function anchorFromThisBoot(anchor: ControlPlaneAnchor, local: Pick<Clock, 'hostMonotonic'>, bootId: string | null = currentBootId()): boolean {
  if (anchor.hostMonotonicMs > local.hostMonotonic()) return false;
  // Both known: they must match. An anchor without one (an older file) on a host that has one is not trusted.
  if (bootId !== null) return anchor.bootId === bootId;
  return true;
}

export class ControlPlaneTime {
  private anchored: ControlPlaneAnchor | undefined;
  /** When the anchor was measured (ISO), by this process or the one whose anchor it adopted. */
  private anchoredAt: string | undefined;

  constructor(
    private readonly local: Pick<Clock, 'now' | 'hostMonotonic'> = systemClock,
    private readonly bootId: () => string | null = currentBootId,
  ) {}

  /**
   * Takes the control plane's `serverTimeMs` as read now; `roundTripMs` (hello sent → ack read),
   * when known, moves it on by half: the server read its clock somewhere in between. Returns the
   * skew it measured (see skewMs).
   */
  observe(serverTimeMs: number, roundTripMs?: number): number {
    const halfTrip = roundTripMs !== undefined && Number.isFinite(roundTripMs) && roundTripMs > 0 ? roundTripMs / 2 : 0;
    const bootId = this.bootId();
    this.anchored = { controlPlaneMs: serverTimeMs + halfTrip, hostMonotonicMs: this.local.hostMonotonic(), ...(bootId !== null ? { bootId } : {}) };
    this.anchoredAt = new Date(this.local.now()).toISOString();
    return this.local.now() - this.anchored.controlPlaneMs;
  }

  /** Unix ms on the control plane's clock; this host's wall clock while no anchor is known. */
  now(): number {
    const anchor = this.anchored;
    return anchor === undefined ? this.local.now() : anchor.controlPlaneMs + (this.local.hostMonotonic() - anchor.hostMonotonicMs);
  }

  /** This host's wall clock minus the control plane's (positive: the host is ahead); null without an anchor. */
  skewMs(): number | null {
    return this.anchored === undefined ? null : this.local.now() - this.now();
  }

  anchor(): ControlPlaneAnchor | undefined {
    return this.anchored;
  }

  /** When the anchor was measured (ISO 8601): by this process's last HelloAck, or as the adopted anchor says. */
  measuredAt(): string | undefined {
    return this.anchoredAt;
  }

  /**
   * Takes an anchor another process of this host measured (a replica following the link holder, or
   * the run before a restart: control-status.json); one from before a reboot is ignored. Kept with
   * when it was measured, so that this process writes it back to the file as it found it: a restart
   * after this one, with the control plane still out of reach, must find it there too.
   */
  adopt(anchor: ControlPlaneAnchor & { measuredAt?: string }): void {
    if (!anchorFromThisBoot(anchor, this.local, this.bootId())) return;
    this.anchored = { controlPlaneMs: anchor.controlPlaneMs, hostMonotonicMs: anchor.hostMonotonicMs, ...(anchor.bootId !== undefined ? { bootId: anchor.bootId } : {}) };
    this.anchoredAt = anchor.measuredAt ?? new Date(this.local.now()).toISOString();
  }

  /** `base` with controlPlaneNow() from this: the clock the pipeline judges control-plane expiries by. */
  clock(base: Clock = systemClock): Clock {
    return { now: () => base.now(), monotonic: () => base.monotonic(), hostMonotonic: () => base.hostMonotonic(), controlPlaneNow: () => this.now() };
  }
}

/** "4 min 0 s behind" / "2 h 0 min ahead of"-style text for a skew (positive: this host is ahead). */
export function describeSkew(skewMs: number): string {
  const seconds = Math.round(Math.abs(skewMs) / 1000);
  const hours = Math.floor(seconds / 3600);
  const minutes = Math.floor((seconds % 3600) / 60);
  const amount = hours > 0 ? `${hours} h ${minutes} min` : minutes > 0 ? `${minutes} min ${seconds % 60} s` : `${(Math.abs(skewMs) / 1000).toFixed(1)} s`;
  return `${amount} ${skewMs > 0 ? 'ahead of' : 'behind'}`;
}

/** The skew an anchor written by another process of this host implies now; null when it no longer applies (a reboot). */
export function skewFromAnchor(anchor: ControlPlaneAnchor, local: Pick<Clock, 'now' | 'hostMonotonic'> = systemClock, bootId: string | null = currentBootId()): number | null {
  // CLOCK_MONOTONIC starts again at boot: an anchor from before it means nothing now.
  if (!anchorFromThisBoot(anchor, local, bootId)) return null;
  return local.now() - (anchor.controlPlaneMs + (local.hostMonotonic() - anchor.hostMonotonicMs));
}
