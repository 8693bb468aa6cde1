/**
 * control-status.json: what the serving node last knew about its control link and the config it
 * serves, for `status` and `doctor` (which run as separate processes). Written atomically whenever
 * either changes.
 */
import { z } from 'zod';
import type { StateStore } from '../state/state-store.js';
import { StateFileError } from '../state/state-store.js';
import { describeIssues } from '../zod-issues.js';

export const CONTROL_STATUS_FILE = 'control-status.json';

/** The config the serving node serves (or why none), for `status`. */
export const configStatusSchema = z.object({
  ready: z.boolean(),
  /** The bundle version; null when not ready. */
  version: z.number().int().min(0).nullable(),
  appliedAt: z.iso.datetime({ offset: true }).nullable(),
  /** Why the node is not ready; null when it is. */
  notReadyReason: z.string().max(2000).nullable(),
  /** True while the served config is the previous enrollment's (re-enrolled while serving); absent otherwise. */
  previousEnrollment: z.boolean().optional(),
});

export type ConfigStatusRecord = z.infer<typeof configStatusSchema>;

/** The spool's fill against its quota and whether its writes fail, for `status` and `doctor`. */
export const spoolStatusSchema = z.object({
  quotaBytes: z.number().int().min(0),
  fullPolicy: z.enum(['reject', 'metering-only']),
  /** At or over the quota when written (status judges the fill again from the file's live bytes). */
  full: z.boolean(),
  /** Set while spool commits fail (disk full, I/O error): every new request is refused. */
  writeFailing: z.object({ code: z.string().max(100), since: z.iso.datetime({ offset: true }) }).nullable(),
});

export type SpoolStatusRecord = z.infer<typeof spoolStatusSchema>;

export const controlStatusSchema = z.object({
  /** True while a session is established. */
  connected: z.boolean(),
  /** Since when the link is in its current state (connected, or not connected). */
  since: z.iso.datetime({ offset: true }),
  lastError: z
    .object({
      code: z.string().max(100),
      message: z.string().max(2000),
      at: z.iso.datetime({ offset: true }),
      advice: z.string().max(1000).optional(),
      /** When a session was established again after it: the error is history, not a current problem. */
      resolvedAt: z.iso.datetime({ offset: true }).optional(),
    })
    .nullable(),
  sessionId: z.string().max(200).nullable(),
  /** Absent in files written before config bundles existed. */
  config: configStatusSchema.optional(),
  /** Absent in files written before it was mirrored, and without a spool. */
  spool: spoolStatusSchema.optional(),
  /**
   * The control plane's time at the last HelloAck, against the host's monotonic clock (shared by
   * its processes), so `status` works out the skew as of now; absent before the first session.
   */
  clock: z
    .object({
      controlPlaneMs: z.number(),
      hostMonotonicMs: z.number(),
      /** The kernel's boot id when taken: an anchor from an earlier boot is ignored. */
      bootId: z.string().max(64).optional(),
      /** This host's wall clock minus the control plane's when measured (positive: ahead). */
      skewMs: z.number().int(),
      measuredAt: z.iso.datetime({ offset: true }),
      maxSkewMs: z.number().int().positive(),
    })
    .optional(),
  /** The serving process; `status` tells a stale file from a live one. */
  pid: z.number().int().positive(),
  /** False once the node stopped cleanly. */
  serving: z.boolean(),
  updatedAt: z.iso.datetime({ offset: true }),
});

export type ControlStatusRecord = z.infer<typeof controlStatusSchema>;

export async function loadControlStatus(store: StateStore): Promise<ControlStatusRecord | undefined> {
  const value = await store.read(CONTROL_STATUS_FILE);
  if (value === undefined) return undefined;
  const parsed = controlStatusSchema.safeParse(value);
  if (!parsed.success) throw new StateFileError(store.path(CONTROL_STATUS_FILE), describeIssues(parsed.error).join('; '));
  return parsed.data;
}

export async function saveControlStatus(store: StateStore, record: ControlStatusRecord): Promise<void> {
  await store.write(CONTROL_STATUS_FILE, controlStatusSchema.parse(record));
}
