/**
 * node-edge runs as root from `<dir>/current/bin/zenova-node`: whoever may write the install dir,
 * or any dir above it, could repoint `current` (or swap a parent) and run their program as root.
 * So the dir, each dir above it up to `/` (of the path as given and of where its symbolic links
 * lead), and an existing install's etc/, data/ and releases/ must be owned by root and not
 * writable by others (or by a group other than root's), unless the sticky bit keeps others from
 * replacing entries they do not own (/tmp's 1777, though no install dir may be there).
 */
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { finding } from './diagnostics.js';
import type { Finding } from './diagnostics.js';
import { installLayout, onHost } from './install-layout.js';
import { resolveOnHost } from './resolve-on-host.js';

const STICKY = 0o1000;

/** `/a/b/c` → `/`, `/a`, `/a/b`, `/a/b/c`. */
function pathChain(dir: string): string[] {
  const chain = ['/'];
  let at = '/';
  for (const segment of dir.split('/').filter((s) => s !== '')) chain.push((at = path.posix.join(at, segment)));
  return chain;
}

/** Why `hostPath` lets someone other than root change what root runs, or undefined. */
async function unsafeBecause(hostRoot: string, hostPath: string, trustedUids: ReadonlySet<number>): Promise<string | undefined> {
  const info = await stat(onHost(hostRoot, hostPath)).catch(() => undefined);
  if (info === undefined) return undefined; // not there yet: the installer creates it, as root
  if (!trustedUids.has(info.uid)) return `${hostPath} is owned by uid ${info.uid}, not root`;
  const mode = info.mode & 0o7777;
  if ((mode & STICKY) !== 0) return undefined;
  if ((mode & 0o002) !== 0) return `${hostPath} is writable by every user (mode 0${(mode & 0o777).toString(8)})`;
  if ((mode & 0o020) !== 0 && info.gid !== 0) return `${hostPath} is writable by group ${info.gid} (mode 0${(mode & 0o777).toString(8)})`;
  return undefined;
}

/**
 * NODE-DIR-UNSAFE findings for install dir `dir`. `trustedUids`: root, and the uid running the
 * installer (the same, as it must run as root; a test's fake host belongs to whoever runs it).
 */
export async function installDirOwnershipFindings(hostRoot: string, dir: string, trustedUids: ReadonlySet<number>): Promise<Finding[]> {
  const real = await resolveOnHost(hostRoot, dir).catch(() => dir);
  const layout = installLayout(real);
  const paths = [...new Set([...pathChain(dir), ...pathChain(real), layout.etc, layout.data, layout.releases])];
  const reasons: string[] = [];
  for (const p of paths) {
    const reason = await unsafeBecause(hostRoot, p, trustedUids);
    if (reason !== undefined) reasons.push(reason);
  }
  if (reasons.length === 0) return [];
  return [finding('NODE-DIR-UNSAFE', `${reasons.slice(0, 3).join('; ')}${reasons.length > 3 ? `; and ${reasons.length - 3} more` : ''}`)];
}
