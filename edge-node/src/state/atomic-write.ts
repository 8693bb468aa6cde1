/**
 * Atomic file replacement for the node's state: write a temp file beside the target, fsync it,
 * rename it over the target, fsync the directory. A crash leaves either the old or the new content,
 * never a torn file, and the result has exactly `mode` (0600 by default: state files hold secrets).
 */
import { randomBytes } from 'node:crypto';
import { open, rename, rm } from 'node:fs/promises';
import path from 'node:path';

export async function writeFileAtomic(file: string, data: string | Uint8Array, mode = 0o600): Promise<void> {
  const dir = path.dirname(file);
  const tmp = path.join(dir, `.${path.basename(file)}.${randomBytes(6).toString('hex')}.tmp`);
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
