/**
 * Points a symlink (a physical path) at `target` atomically: a new link beside it, renamed over
 * it, so the link is never missing or half-written (`current`, `updater`, /usr/local/bin/zenova).
 */
import { randomBytes } from 'node:crypto';
import { rename, rm, symlink } from 'node:fs/promises';

export async function swapSymlink(link: string, target: string): Promise<void> {
  const tmp = `${link}.${randomBytes(4).toString('hex')}.tmp`;
  await symlink(target, tmp);
  await rename(tmp, link).catch(async (err: unknown) => {
    await rm(tmp, { force: true });
    throw err;
  });
}
