/**
 * Where a host path really leads once its symbolic links are followed, resolved inside the host
 * root (an absolute link target is taken on the host, not on the machine running the tests). The
 * install-dir rules judge a path's text; a `/data` that links into `/home` would pass them and the
 * unit's ProtectHome= would then hide the release from node-edge, after the token was used.
 * Segments that do not exist yet are kept as written (the install creates them); a symbolic link
 * on the way whose target does not exist (a volume not mounted yet) is said as `dangling`: the
 * install could not create the dir through it (its mkdir fails with ENOENT or ENOTDIR).
 */
import { lstat, readlink } from 'node:fs/promises';
import path from 'node:path';
import { onHost } from './install-layout.js';

/** Linux gives up after 40 links (ELOOP); so does this. */
const MAX_LINKS = 40;

/** A symbolic link on a path whose target does not exist: `link` as reached, `target` absolute. */
export interface DanglingLink {
  link: string;
  target: string;
}

export interface ResolvedOnHost {
  /** The path with every existing link followed; missing segments kept as written. */
  real: string;
  /** The innermost link whose target is missing, when the path leads through one. */
  dangling?: DanglingLink;
}

/** One segment still to resolve, with the link whose target it came from (undefined: the path's own). */
interface Pending {
  segment: string;
  from: DanglingLink | undefined;
}

export async function resolveOnHost(hostRoot: string, hostPath: string): Promise<string> {
  return (await resolveLinksOnHost(hostRoot, hostPath)).real;
}

export async function resolveLinksOnHost(hostRoot: string, hostPath: string): Promise<ResolvedOnHost> {
  let pending: Pending[] = hostPath.split('/').filter((s) => s !== '').map((segment) => ({ segment, from: undefined }));
  let resolved = '/';
  let links = 0;
  while (pending.length > 0) {
    const [{ segment, from }, ...rest] = pending as [Pending, ...Pending[]];
    pending = rest;
    if (segment === '.') continue;
    if (segment === '..') {
      resolved = path.posix.dirname(resolved);
      continue;
    }
    const next = path.posix.join(resolved, segment);
    const entry = await lstat(onHost(hostRoot, next)).catch((err: unknown) => err as NodeJS.ErrnoException);
    if (entry instanceof Error) {
      const real = path.posix.join(next, ...pending.map((p) => p.segment));
      // Missing inside a link's target: that link dangles. Missing in the path's own segments: not created yet.
      const missing = entry.code === 'ENOENT' || entry.code === 'ENOTDIR';
      return missing && from !== undefined ? { real, dangling: from } : { real };
    }
    if (!entry.isSymbolicLink()) {
      resolved = next;
      continue;
    }
    if (++links > MAX_LINKS) throw Object.assign(new Error(`too many levels of symbolic links at ${next}`), { code: 'ELOOP' });
    const target = await readlink(onHost(hostRoot, next));
    const link: DanglingLink = { link: next, target: path.posix.resolve(resolved, target) };
    pending = [...target.split('/').filter((s) => s !== '').map((s) => ({ segment: s, from: link })), ...pending];
    if (target.startsWith('/')) resolved = '/';
  }
  return { real: resolved };
}
