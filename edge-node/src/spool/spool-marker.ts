/**
 * spool.json in the state dir: which spool this node created. It outlives the spool file, so a
 * missing or swapped spool.db is noticed: an empty new spool is never taken as proof that the old
 * one's records were delivered.
 */
import { z } from 'zod';
import { StateFileError } from '../state/state-store.js';
import type { StateStore } from '../state/state-store.js';
import type { SpoolMeta } from './spool-file.js';

export const SPOOL_MARKER_FILE = 'spool.json';

const markerSchema = z.object({
  spoolId: z.string().min(1).max(64),
  nodeId: z.string().min(1).max(128),
  createdAt: z.string().max(64),
  /**
   * The spool's highest record sequence known durable (a checkpoint synced it): a spool.db whose own
   * is lower is an older copy put back. Optional: a marker from before it, or written at creation.
   * Releases before it drop the field when they read the file (zod strips unknown keys).
   */
  sequenceMark: z.number().int().nonnegative().optional(),
});

export type SpoolMarker = z.infer<typeof markerSchema>;

/**
 * A damaged marker guards nothing: moved aside, the next start adopts the id spool.db itself holds
 * (spool.db, and its undelivered records, stay where they are).
 */
const DAMAGED_MARKER_ADVICE = 'restore it, or move it aside (never spool.db): node-edge then takes the spool id spool.db itself holds at its next start';

export async function loadSpoolMarker(store: StateStore): Promise<SpoolMarker | undefined> {
  let value: unknown;
  try {
    value = await store.read(SPOOL_MARKER_FILE);
  } catch (err) {
    if (!(err instanceof StateFileError && err.cause instanceof SyntaxError)) throw err;
    throw new StateFileError(store.path(SPOOL_MARKER_FILE), `is not valid JSON; ${DAMAGED_MARKER_ADVICE}`, { cause: err });
  }
  if (value === undefined) return undefined;
  const parsed = markerSchema.safeParse(value);
  if (!parsed.success) throw new StateFileError(store.path(SPOOL_MARKER_FILE), `is not a spool marker; ${DAMAGED_MARKER_ADVICE}`);
  return parsed.data;
}

export async function saveSpoolMarker(store: StateStore, meta: SpoolMeta, sequenceMark?: number): Promise<void> {
  await store.write(SPOOL_MARKER_FILE, {
    spoolId: meta.spoolId,
    nodeId: meta.nodeId,
    createdAt: meta.createdAt,
    ...(sequenceMark !== undefined ? { sequenceMark } : {}),
  } satisfies SpoolMarker);
}
