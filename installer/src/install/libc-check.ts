/**
 * The host check against the package's glibc floor (manifest `requires`): the host's glibc (the one
 * the installer's own Node runs on: the carried runtime, the C library node-edge will get) and the
 * GLIBCXX versions of the libstdc++.so.6 the dynamic loader would pick. Below the floor node-edge
 * would only fail when it starts (ERR_DLOPEN_FAILED "GLIBC_2.34 not found"), after the token is
 * used; so this blocks before any write.
 */
import type { LibstdcxxInfo } from '../host/host-probe.js';
import { compareDottedVersions, highestGlibcxx } from '../package/libc-requirements.js';
import type { LibcRequirements } from '../package/libc-requirements.js';
import { finding } from './diagnostics.js';
import type { Finding } from './diagnostics.js';

export interface HostLibc {
  glibc: string | undefined;
  /** Only looked up when the package needs GLIBCXX. */
  libstdcxx: LibstdcxxInfo | undefined;
}

function needs(requires: LibcRequirements): string {
  const parts = [requires.glibc !== undefined ? `glibc ≥ ${requires.glibc}` : undefined, requires.glibcxx !== undefined ? `libstdc++ with GLIBCXX_${requires.glibcxx}` : undefined];
  return parts.filter((p) => p !== undefined).join(' and ');
}

export function libcLabel(requires: LibcRequirements, host: HostLibc): string {
  const glibcxx = host.libstdcxx === undefined ? undefined : highestGlibcxx(host.libstdcxx.versions);
  const has = [host.glibc !== undefined ? `glibc ${host.glibc}` : 'no glibc', requires.glibcxx === undefined ? undefined : glibcxx !== undefined ? `GLIBCXX_${glibcxx}` : 'no libstdc++'];
  return `C libraries: ${has.filter((p) => p !== undefined).join(', ')} (the package needs ${needs(requires)})`;
}

export function libcFindings(requires: LibcRequirements, host: HostLibc): Finding[] {
  const out: Finding[] = [];
  const what = `the package's native files (its Node runtime, better-sqlite3) need ${needs(requires)}`;
  if (requires.glibc !== undefined) {
    if (host.glibc === undefined) out.push(finding('NODE-HOST-LIBC', `${what}; this host's C library is not glibc (or reports no version)`));
    else if (compareDottedVersions(host.glibc, requires.glibc) < 0) out.push(finding('NODE-HOST-LIBC', `${what}; this host has glibc ${host.glibc}`));
  }
  if (requires.glibcxx !== undefined) {
    const lib = host.libstdcxx;
    const has = lib === undefined ? undefined : highestGlibcxx(lib.versions);
    if (lib === undefined) out.push(finding('NODE-HOST-LIBC', `${what}; this host has no libstdc++.so.6 (not in the ldconfig cache nor the standard library dirs)`));
    else if (has === undefined || !lib.versions.includes(`GLIBCXX_${requires.glibcxx}`)) {
      out.push(finding('NODE-HOST-LIBC', `${what}; this host's ${lib.file} provides ${has === undefined ? 'no GLIBCXX version' : `up to GLIBCXX_${has}`}`));
    }
  }
  return out;
}
