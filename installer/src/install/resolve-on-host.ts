/**
 * Where a host path really leads once its symbolic links are followed, resolved inside the host
 * root (an absolute link target is taken on the host, not on the machine running the tests). The
 * install-dir rules judge a path's text; a `/data` that links into `/home` would pass them and the
 * unit's ProtectHome= would then hide the release from node-edge, after the token was used.
 * Segments that do not exist yet are kept as written (the install creates them).
 */
import { lstat, readlink } from 'node:fs/promises';
import path from 'node:path';
import { onHost } from './install-layout.js';

/** Linux gives up after 40 links (ELOOP); so does this. */
const MAX_LINKS = 40;

export async function resolveOnHost(hostRoot: string, hostPath: string): Promise<string> {
  let pending = hostPath.split('/').filter((s) => s !== '');
  let resolved = '/';
  let links = 0;
  while (pending.length > 0) {
    const [segment, ...rest] = pending as [string, ...string[]];
    pending = rest;
    if (segment === '.') continue;
    if (segment === '..') {
      resolved = path.posix.dirname(resolved);
      continue;
    }
    const next = path.posix.join(resolved, segment);
    const entry = await lstat(onHost(hostRoot, next)).catch(() => undefined);
    if (entry === undefined) return path.posix.join(next, ...pending);
    if (!entry.isSymbolicLink()) {
      resolved = next;
      continue;
    }
    if (++links > MAX_LINKS) throw Object.assign(new Error(`too many levels of symbolic links at ${next}`), { code: 'ELOOP' });
    const target = await readlink(onHost(hostRoot, next));
    pending = [...target.split('/').filter((s) => s !== ''), ...pending];
    if (target.startsWith('/')) resolved = '/';
  }
  return resolved;
}
