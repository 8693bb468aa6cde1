// The real HostProbe: /proc/meminfo, statfs, /proc/self/mountinfo, /sys/fs/selinux, AppArmor's
// securityfs, a bind attempt for ports, process.report's glibc version and the ldconfig cache for
// libstdc++. Read-only, like the interface promises.
import { execFile } from 'node:child_process';
import { constants } from 'node:fs';
import { access, readFile, realpath, stat, statfs } from 'node:fs/promises';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { HostProbe, MountInfo, SelinuxMode } from './host-probe.js';
import { hostLibgccS, hostLibstdcxx } from './libstdcxx-lookup.js';
import { resolveLinksOnHost } from '../install/resolve-on-host.js';
import type { DanglingLink } from '../install/resolve-on-host.js';
import { unameArch } from './uname-arch.js';

const STAT_TIMEOUT_MS = 5_000;

/** A path that is, or is under, a symbolic link whose target does not exist: no filesystem to judge it on. */
export class DanglingLinkError extends Error {
  readonly code = 'ENOENT';
  constructor(readonly link: DanglingLink) {
    super(`${link.link} is a symbolic link to ${link.target}, which does not exist`);
  }
}

/**
 * Where `dir` is judged (statfs, mount, access, SELinux label): `dir` itself if it exists, else its
 * nearest existing ancestor (the dir is not created yet), with its symbolic links followed, so a
 * `/data` linked to a volume is judged on that volume, not on the filesystem holding the link. A
 * path that is, or is under, a link whose target does not exist (a volume not mounted yet) throws
 * DanglingLinkError: the link's parent is on another filesystem than the one the node would be on.
 */
export async function nearestExisting(dir: string): Promise<string> {
  const resolved = await resolveLinksOnHost('/', path.resolve(dir));
  if (resolved.dangling !== undefined) throw new DanglingLinkError(resolved.dangling);
  let current = resolved.real;
  for (;;) {
    try {
      await stat(current);
      return await realpath(current);
    } catch {
      const parent = path.dirname(current);
      if (parent === current) return current;
      current = parent;
    }
  }
}

/** mountinfo escapes spaces and friends as \040 etc. */
function unescapeMount(value: string): string {
  return value.replace(/\\([0-7]{3})/g, (_m, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

/** Parses /proc/self/mountinfo lines into mounts. */
export function parseMountInfo(text: string): MountInfo[] {
  const mounts: MountInfo[] = [];
  for (const line of text.split('\n')) {
    const [left, right] = line.split(' - ');
    if (left === undefined || right === undefined) continue;
    const fields = left.split(' ');
    const mountPoint = fields[4];
    const options = fields[5];
    const fsType = right.split(' ')[0];
    if (mountPoint === undefined || options === undefined || fsType === undefined) continue;
    mounts.push({ mountPoint: unescapeMount(mountPoint), fsType, options: options.split(',') });
  }
  return mounts;
}

/** The mount holding `dir`: the last-mounted of the longest matching mount points. */
export function mountFor(mounts: readonly MountInfo[], dir: string): MountInfo | undefined {
  let best: MountInfo | undefined;
  for (const m of mounts) {
    const within = m.mountPoint === '/' || dir === m.mountPoint || dir.startsWith(`${m.mountPoint}/`);
    if (within && (best === undefined || m.mountPoint.length >= best.mountPoint.length)) best = m;
  }
  return best;
}

export function linuxHostProbe(): HostProbe {
  return {
    os: () => process.platform,
    arch: () => unameArch(process.arch),
    isRoot: () => process.getuid?.() === 0,
    async memoryBytes() {
      try {
        const m = /^MemTotal:\s+(\d+)\s+kB/m.exec(await readFile('/proc/meminfo', 'utf8'));
        return m ? Number(m[1]) * 1024 : os.totalmem();
      } catch {
        return os.totalmem();
      }
    },
    async freeDiskBytes(dir) {
      try {
        const s = await statfs(await nearestExisting(dir));
        return s.bavail * s.bsize;
      } catch {
        return undefined;
      }
    },
    async mountOf(dir) {
      try {
        return mountFor(parseMountInfo(await readFile('/proc/self/mountinfo', 'utf8')), await nearestExisting(dir));
      } catch {
        return undefined;
      }
    },
    async writeError(dir) {
      let target: string;
      try {
        target = await nearestExisting(dir);
      } catch (err) {
        // Through a dangling link the install's mkdir fails as access() would: ENOENT, at that link;
        // a link loop with ELOOP.
        if (err instanceof DanglingLinkError) return { dir: err.link.link, code: err.code };
        return { dir, code: (err as NodeJS.ErrnoException).code ?? 'ELOOP' };
      }
      return access(target, constants.W_OK).then(() => undefined, (err: unknown) => ({ dir: target, code: (err as NodeJS.ErrnoException).code ?? 'EACCES' }));
    },
    async systemdRunning() {
      try {
        return (await stat('/run/systemd/system')).isDirectory();
      } catch {
        return false;
      }
    },
    async selinuxMode(): Promise<SelinuxMode> {
      try {
        return (await readFile('/sys/fs/selinux/enforce', 'utf8')).trim() === '1' ? 'enforcing' : 'permissive';
      } catch {
        return 'disabled';
      }
    },
    async selinuxType(dir) {
      const target = await nearestExisting(dir).catch(() => undefined);
      if (target === undefined) return undefined;
      return new Promise((resolve) => {
        execFile('stat', ['--printf=%C', target], { timeout: STAT_TIMEOUT_MS }, (err, stdout) => {
          // user:role:type:level
          resolve(err ? undefined : stdout.split(':')[2]);
        });
      });
    },
    async apparmorEnforcedProfiles() {
      try {
        const text = await readFile('/sys/kernel/security/apparmor/profiles', 'utf8');
        return text.split('\n').flatMap((l) => {
          const m = /^(.*) \(enforce\)$/.exec(l.trim());
          return m?.[1] !== undefined ? [m[1]] : [];
        });
      } catch {
        return [];
      }
    },
    bindError(host, port) {
      return new Promise((resolve) => {
        const server = createServer();
        // Every failure counts: node-edge would fail the same way, only after the token is used.
        server.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
        server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(undefined)));
      });
    },
    glibcVersion() {
      // The C library this process was dynamically linked against at run time: the one node-edge gets.
      const header = (process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header;
      return header?.glibcVersionRuntime;
    },
    async libstdcxx() {
      try {
        return await hostLibstdcxx();
      } catch {
        return undefined;
      }
    },
    async libgccS() {
      try {
        return await hostLibgccS();
      } catch {
        return undefined;
      }
    },
  };
}
