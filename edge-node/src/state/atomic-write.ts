/**
 * Atomic file replacement for the node's state: write a temp file beside the target, fsync it,
 * rename it over the target, fsync the directory. A crash leaves either the old or the new content,
 * never a torn file, and the result has exactly `mode` (0600 by default: state files hold secrets).
 */
import { randomBytes } from 'node:crypto';
import { lstat, open, readdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';

/** Random bytes in a temp file's name (hex: twice as many characters). */
const TEMP_NAME_BYTES = 6;

/**
 * How old a temp file of a write made without a lock replicas share must be before a start takes it
 * for a crash's leftover (removeAbandonedWrites). A write holds its temp file for milliseconds (write,
 * fsync, rename); an hour is far past any disk's stall.
 */
export const ABANDONED_TEMP_MIN_AGE_MS = 60 * 60 * 1000;

/** The temp file name writeFileAtomic uses for a file named `name`. */
function tempName(name: string): string {
  return `.${name}.${randomBytes(TEMP_NAME_BYTES).toString('hex')}.tmp`;
}

/** True when `entry` is exactly a name tempName(`name`) can produce. */
function isTempNameOf(entry: string, name: string): boolean {
  const prefix = `.${name}.`;
  if (!entry.startsWith(prefix) || !entry.endsWith('.tmp')) return false;
  const random = entry.slice(prefix.length, -'.tmp'.length);
  return random.length === TEMP_NAME_BYTES * 2 && /^[0-9a-f]+$/.test(random);
}

export async function writeFileAtomic(file: string, data: string | Uint8Array, mode = 0o600): Promise<void> {
  const dir = path.dirname(file);
  const tmp = path.join(dir, tempName(path.basename(file)));
  // 'wx': never follow or reuse something already at the temp name.
  const handle = await open(tmp, 'wx', mode);
  try {
    // Explicit chmod: the mode given to open() is filtered by the process umask.
    await handle.chmod(mode);
    await handle.writeFile(data);
    await handle.sync();
  } catch (err) {
    await handle.close().catch(() => undefined);
    await rm(tmp, { force: true });
    throw err;
  }
  await handle.close();
  try {
    await rename(tmp, file);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  // The rename itself is durable only once the directory entry is on disk.
  const dirHandle = await open(dir, 'r');
  try {
    await dirHandle.sync();
  } finally {
    await dirHandle.close();
  }
}

/**
 * Removes the temp files of writeFileAtomic for the files `names` in `dir` that a crash (kill -9,
 * power loss) left mid-write: nothing else removes them, and they hold part of what was written
 * (secrets). Only regular files named exactly as writeFileAtomic names them are removed. The caller
 * must hold the lock every writer of those files holds, or it may remove a write in progress.
 * Resolves to the names removed; a missing `dir` has none.
 */
export async function removeInterruptedWrites(dir: string, names: readonly string[]): Promise<string[]> {
  return removeTempFiles(dir, names, () => true);
}

/**
 * removeInterruptedWrites for files whose writers take no lock replicas share (control-status.json,
 * spool.json): a temp file may be a live replica's write in progress, so only those last modified
 * ABANDONED_TEMP_MIN_AGE_MS or more before `now` are removed. An age rather than the writer's pid in
 * the name: the name `.<name>.<12 hex>.tmp` is what the installer (install-dir-contents.ts) and
 * docs/node-api.md know as the node's own, and a pid from another pid namespace cannot be checked.
 * Taken wrongly (a write stalled over an hour), the write fails at its rename and the file keeps its
 * previous content; both writers log the failure and write again later.
 */
export async function removeAbandonedWrites(dir: string, names: readonly string[], now = Date.now()): Promise<string[]> {
  return removeTempFiles(dir, names, (modifiedMs) => now - modifiedMs >= ABANDONED_TEMP_MIN_AGE_MS);
}

/** Removes the temp files of `names` in `dir` (regular files only) whose modification time `abandoned` takes; resolves to their names. */
async function removeTempFiles(dir: string, names: readonly string[], abandoned: (modifiedMs: number) => boolean): Promise<string[]> {
  let entries: string[];
  try {
    entries = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const removed: string[] = [];
  for (const entry of entries) {
    if (!names.some((name) => isTempNameOf(entry, name))) continue;
    const file = path.join(dir, entry);
    // Not a file writeFileAtomic made (a symbolic link, a directory): left alone.
    const info = await lstat(file).catch(() => undefined);
    if (info?.isFile() !== true || !abandoned(info.mtimeMs)) continue;
    await rm(file, { force: true });
    removed.push(entry);
  }
  return removed;
}
