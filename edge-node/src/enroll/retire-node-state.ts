/**
 * Re-enrolling a state dir as ANOTHER node (its node was deleted on the control plane and created
 * again: a new node id): the old node's node-bound state — its spool (records only it can deliver),
 * spool marker, config cache and applied-version mark, control-status mirror — would make `serve`
 * refuse (a spool of another node is never adopted) or misbehave (a config for another node id, the
 * old node's last error). It is moved aside, never deleted, into `retired/<name>-<id8>-<UTC time>/`
 * in the state dir, with modes kept (renames on one filesystem).
 *
 * Not moved: credit-leases.sqlite (rows carry their node id; another node's are kept and never
 * served from: lease-store.ts), rate-limits.sqlite, mcp-sessions.sqlite, control-link.sqlite and the
 * spool owner slots (not bound to a node), identity.json and credential.json (replaced by the
 * enrollment), enroll-attempt.json (the enrollment in progress).
 */
import { existsSync } from 'node:fs';
import { mkdir, open, readdir, rename, rmdir } from 'node:fs/promises';
import path from 'node:path';
import { APPLIED_VERSION_FILE } from '../config/applied-version.js';
import { CONFIG_CACHE_DIR } from '../config/bundle-cache.js';
import { CONTROL_STATUS_FILE, loadControlStatus } from '../control/control-status.js';
import { readSpoolFigures } from '../spool/spool-figures.js';
import type { SpoolFigures } from '../spool/spool-figures.js';
import { SPOOL_FILE } from '../spool/spool-file.js';
import { SPOOL_MARKER_FILE } from '../spool/spool-marker.js';
import { isSpoolHeldOpen } from '../spool/spool-owner-lock.js';
import type { NodeIdentity } from '../state/identity.js';
import { STATE_DIR_MODE } from '../state/state-store.js';
import type { StateStore } from '../state/state-store.js';

export const RETIRED_DIR = 'retired';

/**
 * The order of the moves, so that a crash between two of them (identity.json still the old node's:
 * it is replaced only after the last move) leaves a state dir that `serve` accepts as the old node
 * or refuses without loss, and that a rerun of the same command decides as the first run did and
 * finishes:
 * - the applied-version mark before config/ (a cache missing under a mark is refused as rolled
 *   back); without either, the old node serves nothing until its control plane sends a config;
 * - spool.db before its -wal and -shm: spool.db left without its WAL would open with the committed
 *   records the WAL holds silently missing;
 * - spool.json after them: while it names a spool that is gone, serve refuses to create a new
 *   spool, which would otherwise replay a -wal left behind into it;
 * - control-status.json last: while the spool is still here, its NODE_DELETED is what lets a rerun
 *   move the spool's records aside.
 */
const NODE_BOUND_ENTRIES = [APPLIED_VERSION_FILE, CONFIG_CACHE_DIR, SPOOL_FILE, `${SPOOL_FILE}-wal`, `${SPOOL_FILE}-shm`, SPOOL_MARKER_FILE, CONTROL_STATUS_FILE] as const;

/** The node a state dir holds before a re-enrollment, with what decides whether its state may go. */
export interface PreviousNode {
  identity: NodeIdentity;
  /** The spool's figures as `zenova-node status` reads them; null when there is no spool. */
  spool: SpoolFigures | null;
  /** The node's control link was last refused with NODE_DELETED (control-status.json). */
  deleted: boolean;
}

export interface RetiredState {
  /** The directory the files went to, relative to the state dir (`retired/…`). */
  dir: string;
  /** The node-bound entries the directory holds (with those an earlier run of the command moved), in the order moved. */
  moved: string[];
  /** The old node's records not yet delivered (backlog + open rows) kept there, read from its spool; null when unreadable. */
  undelivered: number | null;
}

/** Reads, without changing anything, what a re-enrollment as another node needs to know of `identity`'s node. */
export async function inspectPreviousNode(store: StateStore, identity: NodeIdentity): Promise<PreviousNode> {
  let deleted = false;
  try {
    deleted = (await loadControlStatus(store))?.lastError?.code === 'NODE_DELETED';
  } catch {
    deleted = false; // a damaged mirror proves nothing: the node counts as not deleted
  }
  return { identity, spool: readSpoolFigures(store.dir), deleted };
}

/** Records of the previous node's spool not yet delivered; null when the spool cannot be read. */
export function undeliveredCount(spool: SpoolFigures | null): number | null {
  if (spool === null) return 0;
  return spool.error === null ? spool.backlog + spool.open : null;
}

/**
 * Why the previous node's state must stay (the re-enrollment is refused), or undefined when it may
 * be moved aside: its spool is empty, or the node was deleted (its records can never be delivered).
 */
export function keepPreviousNodeReason(previous: PreviousNode, newNodeId: string, stateDir: string): string | undefined {
  const old = previous.identity;
  if (previous.deleted) return undefined;
  const undelivered = undeliveredCount(previous.spool);
  if (undelivered === 0) return undefined;
  const what =
    undelivered === null
      ? `whose spool cannot be read (${previous.spool?.error ?? 'unknown'}), so it may hold records not yet delivered`
      : `with ${undelivered} record${undelivered === 1 ? '' : 's'} not yet delivered`;
  return (
    `${stateDir} holds node ${old.nodeName} (${old.nodeId}) ${what}; enrolling it as node ${newNodeId} would strand them ` +
    `(only node ${old.nodeId} can deliver them). Let ${old.nodeName} deliver them first (start it again; \`zenova-node status\` shows the backlog), ` +
    `or, if ${old.nodeName} is really gone (deleted on the control plane), start it once so it records the refusal (NODE_DELETED), then run this again`
  );
}

/** Whether a node-edge process has this state dir's spool open (it holds an owner slot: spool-owner-lock.ts). */
export function isSpoolInUse(stateDir: string): boolean {
  return isSpoolHeldOpen(path.join(stateDir, SPOOL_FILE));
}

const utcStamp = (ms: number): string => new Date(ms).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');

/**
 * Moves the previous node's node-bound state into one new directory under retired/. The directory
 * is filled under a hidden `.…partial` name and renamed to its final name at the end: a rerun after
 * a crash finds the partial one of the same node and finishes into it, so a spool.db and its -wal
 * never end up in two places. A rerun after the final rename (the new identity not saved: a crash,
 * a full disk) finds nothing node-bound left and names that directory instead of a new empty one.
 */
export async function retirePreviousNode(store: StateStore, previous: PreviousNode, now: number): Promise<RetiredState> {
  const old = previous.identity;
  const retired = path.join(store.dir, RETIRED_DIR);
  await mkdir(retired, { recursive: true, mode: STATE_DIR_MODE });
  const prefix = `${old.nodeName.replace(/[^A-Za-z0-9._-]/g, '_')}-${old.nodeId.slice(0, 8)}`;
  const siblings = (await readdir(retired)).sort();
  const left = siblings.find((e) => e.startsWith(`.${prefix}-`) && e.endsWith('.partial'));
  const toMove = NODE_BOUND_ENTRIES.filter((entry) => existsSync(path.join(store.dir, entry)));
  if (toMove.length === 0 && (left === undefined || (await readdir(path.join(retired, left))).length === 0)) {
    const earlier = earlierRetiredDir(retired, siblings, prefix);
    if (earlier !== undefined) {
      // An empty partial is what a run that failed on its final rename left: it holds nothing.
      if (left !== undefined) await rmdir(path.join(retired, left));
      return retiredIn(retired, earlier);
    }
  }
  const partial = left ?? `.${prefix}-${utcStamp(now)}.partial`;
  if (left === undefined) await mkdir(path.join(retired, partial), { mode: STATE_DIR_MODE });
  for (const entry of toMove) await rename(path.join(store.dir, entry), path.join(retired, partial, entry));
  const name = await finishPartial(retired, partial);
  // The renames are durable once both directories' entries are on disk.
  for (const dir of [store.dir, retired]) {
    const handle = await open(dir, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  }
  return retiredIn(retired, name);
}

/**
 * The latest directory an earlier run finished for the node of `prefix` (`<prefix>-<UTC time>`,
 * maybe `-<n>`), preferring one that holds any of its state; undefined when there is none.
 */
function earlierRetiredDir(retired: string, siblings: readonly string[], prefix: string): string | undefined {
  const finished = siblings.filter((e) => e.startsWith(`${prefix}-`) && /^\d{8}T\d{6}Z(?:-\d+)?$/.test(e.slice(prefix.length + 1)));
  const holding = finished.filter((e) => NODE_BOUND_ENTRIES.some((entry) => existsSync(path.join(retired, e, entry))));
  return holding.at(-1) ?? finished.at(-1);
}

/**
 * Renames the filled `partial` to its final name or, when that is taken (two runs within one
 * second), to the first free `<name>-<n>`: never into the other directory, where this spool.db
 * could meet another spool's -wal.
 */
async function finishPartial(retired: string, partial: string): Promise<string> {
  const name = partial.slice(1, -'.partial'.length);
  for (let n = 1; ; n++) {
    const target = n === 1 ? name : `${name}-${n}`;
    try {
      await rename(path.join(retired, partial), path.join(retired, target));
      return target;
    } catch (err) {
      if (!['ENOTEMPTY', 'EEXIST', 'ENOTDIR'].includes((err as NodeJS.ErrnoException).code ?? '')) throw err;
    }
  }
}

/** What `name` under retired/ holds of the old node, with its records not yet delivered read from the spool there. */
function retiredIn(retired: string, name: string): RetiredState {
  const dir = path.join(retired, name);
  // Listed before the spool is read: reading may create its -wal and -shm.
  const moved = NODE_BOUND_ENTRIES.filter((entry) => existsSync(path.join(dir, entry)));
  return { dir: path.join(RETIRED_DIR, name), moved, undelivered: undeliveredCount(readSpoolFigures(dir)) };
}

/** One line for enroll's and the installer's output: what went where, and the records kept aside. */
export function describeRetired(retired: RetiredState & { nodeId: string; nodeName: string }, stateDir: string): string {
  const records =
    retired.undelivered === null
      ? `its spool could not be read, so how many of its records were not yet delivered is unknown`
      : `${retired.undelivered} record${retired.undelivered === 1 ? '' : 's'} of node ${retired.nodeName} not yet delivered ${retired.undelivered === 1 ? 'is' : 'are'} kept there`;
  return (
    `moved node ${retired.nodeName} (${retired.nodeId})'s state aside to ${path.join(stateDir, retired.dir)}: ` +
    `${retired.moved.length > 0 ? retired.moved.join(', ') : 'nothing was left to move'}; ${records} (no other node can deliver them)`
  );
}
