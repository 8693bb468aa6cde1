/**
 * data/update-state.json: the node's upgrades, written by `--upgrade` (upgrade-node.ts) and shown by
 * `zenova status`. `inProgress` is written before anything of the node is switched and removed with
 * the outcome: an upgrade killed midway (a dropped SSH session, a power loss) is found by the next
 * run, which finishes it or switches back, with the texts the switch replaced. `failedVersion` is a
 * release that was switched in and not ready: an automatic upgrade must not try it again until an
 * operator asks (DESIGN §8).
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { writeFileAtomic } from '../../../edge-node/src/state/atomic-write.js';
import { STATE_FILE_MODE } from '../../../edge-node/src/state/state-store.js';
import type { InstallLayout } from './install-layout.js';
import { onHost } from './install-layout.js';

export const UPDATE_STATE_FILE = 'update-state.json';
const MAX_BYTES = 512 * 1024;

export const updateStateSchema = z.object({
  lastUpgrade: z.object({
    from: z.string().max(64),
    to: z.string().max(64),
    at: z.string().max(64),
    outcome: z.enum(['ready', 'rolled-back']),
    reason: z.string().max(4096).optional(),
  }),
  failedVersion: z.string().max(64).optional(),
  inProgress: z.object({
    from: z.string().max(64),
    to: z.string().max(64),
    at: z.string().max(64),
    /** The node's replica count the control plane answered (absent in a record of an earlier installer). */
    replicas: z.number().int().min(1).max(999).optional(),
    /** What the switch replaces: etc/node.env and the two units as they were (no secrets in them). */
    previous: z.object({ env: z.string().max(64 * 1024), nodeUnit: z.string().max(64 * 1024).optional(), updaterUnit: z.string().max(64 * 1024).optional() }),
  }).optional(),
}).partial({ lastUpgrade: true });
export type UpdateState = z.infer<typeof updateStateSchema>;
export type UpgradeInProgress = NonNullable<UpdateState['inProgress']>;

function file(hostRoot: string, layout: InstallLayout): string {
  return onHost(hostRoot, path.posix.join(layout.data, UPDATE_STATE_FILE));
}

export async function writeUpdateState(hostRoot: string, layout: InstallLayout, state: UpdateState): Promise<void> {
  await writeFileAtomic(file(hostRoot, layout), `${JSON.stringify(state, null, 2)}\n`, STATE_FILE_MODE);
}

/** The last upgrade's outcome; undefined when there was none, or the file is not one (status only shows it). */
export async function readUpdateState(hostRoot: string, layout: InstallLayout): Promise<UpdateState | undefined> {
  try {
    const text = await readFile(file(hostRoot, layout), 'utf8');
    if (text.length > MAX_BYTES) return undefined;
    const parsed = updateStateSchema.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
