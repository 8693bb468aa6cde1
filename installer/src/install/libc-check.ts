/**
 * The host check against the package's glibc floor (manifest `requires`): the host's glibc (the one
 * the installer's own Node runs on: the carried runtime, the C library node-edge will get), the
 * GLIBCXX and CXXABI versions of the libstdc++.so.6 and the GCC versions of the libgcc_s.so.1 the
 * dynamic loader would pick. Below the floor node-edge would only fail when it starts
 * (ERR_DLOPEN_FAILED "GLIBC_2.34 not found", "CXXABI_1.3.9 not found"), after the token is used; so
 * this blocks before any write. A part the manifest does not record (older packages) is not checked.
 */
import type { HostLibrary } from '../host/host-probe.js';
import { compareDottedVersions, highestCxxabi, highestGcc, highestGlibcxx } from '../package/libc-requirements.js';
import type { LibcRequirements } from '../package/libc-requirements.js';
import { finding } from './diagnostics.js';
import type { Finding } from './diagnostics.js';

export interface HostLibc {
  glibc: string | undefined;
  /** Only looked up when the package needs GLIBCXX or CXXABI. */
  libstdcxx: HostLibrary | undefined;
  /** Only looked up when the package needs GCC. */
  libgccS: HostLibrary | undefined;
}

/** One library's versioned parts of the floor: the version-name prefix and how to find its highest. */
interface VersionPart {
  part: 'glibcxx' | 'cxxabi' | 'gcc';
  prefix: string;
  highest: (names: Iterable<string>) => string | undefined;
}

interface LibraryFloor {
  /** The soname, as the loader's error and the cause name it. */
  soname: string;
  /** How the needs phrase names it. */
  name: string;
  host: (host: HostLibc) => HostLibrary | undefined;
  parts: VersionPart[];
}

const LIBRARIES: LibraryFloor[] = [
  {
    soname: 'libstdc++.so.6',
    name: 'libstdc++',
    host: (h) => h.libstdcxx,
    parts: [
      { part: 'glibcxx', prefix: 'GLIBCXX_', highest: highestGlibcxx },
      { part: 'cxxabi', prefix: 'CXXABI_', highest: highestCxxabi },
    ],
  },
  { soname: 'libgcc_s.so.1', name: 'libgcc_s', host: (h) => h.libgccS, parts: [{ part: 'gcc', prefix: 'GCC_', highest: highestGcc }] },
];

/** The versions `requires` asks of `lib`, e.g. ['GLIBCXX_3.4.29', 'CXXABI_1.3.9']. */
function neededOf(lib: LibraryFloor, requires: LibcRequirements): Array<VersionPart & { version: string }> {
  return lib.parts.flatMap((p) => (requires[p.part] === undefined ? [] : [{ ...p, version: `${p.prefix}${requires[p.part]}` }]));
}

/** Whether the package needs anything of libstdc++.so.6 (so the host's must be looked up). */
export function needsLibstdcxx(requires: LibcRequirements): boolean {
  return requires.glibcxx !== undefined || requires.cxxabi !== undefined;
}

/** Whether the package needs anything of libgcc_s.so.1. */
export function needsLibgccS(requires: LibcRequirements): boolean {
  return requires.gcc !== undefined;
}

/** "a", "a and b", "a, b, and c". */
function listed(items: string[]): string {
  if (items.length <= 2) return items.join(' and ');
  return `${items.slice(0, -1).join(', ')}, and ${items.at(-1)}`;
}

function needs(requires: LibcRequirements): string {
  const parts = [requires.glibc !== undefined ? `glibc ≥ ${requires.glibc}` : undefined];
  for (const lib of LIBRARIES) {
    const versions = neededOf(lib, requires).map((n) => n.version);
    if (versions.length > 0) parts.push(`${lib.name} with ${versions.join(' and ')}`);
  }
  return listed(parts.filter((p) => p !== undefined));
}

export function libcLabel(requires: LibcRequirements, host: HostLibc): string {
  const has = [host.glibc !== undefined ? `glibc ${host.glibc}` : 'no glibc'];
  for (const lib of LIBRARIES) {
    const needed = neededOf(lib, requires);
    if (needed.length === 0) continue;
    const found = lib.host(host);
    if (found === undefined) {
      has.push(`no ${lib.name}`);
      continue;
    }
    for (const n of needed) {
      const highest = n.highest(found.versions);
      has.push(highest !== undefined ? `${n.prefix}${highest}` : `no ${n.prefix}`);
    }
  }
  return `C libraries: ${has.join(', ')} (the package needs ${needs(requires)})`;
}

export function libcFindings(requires: LibcRequirements, host: HostLibc): Finding[] {
  const out: Finding[] = [];
  const what = `the package's native files (its Node runtime, better-sqlite3) need ${needs(requires)}`;
  if (requires.glibc !== undefined) {
    if (host.glibc === undefined) out.push(finding('NODE-HOST-LIBC', `${what}; this host's C library is not glibc (or reports no version)`));
    else if (compareDottedVersions(host.glibc, requires.glibc) < 0) out.push(finding('NODE-HOST-LIBC', `${what}; this host has glibc ${host.glibc}`));
  }
  for (const lib of LIBRARIES) {
    const needed = neededOf(lib, requires);
    if (needed.length === 0) continue;
    const found = lib.host(host);
    if (found === undefined) {
      out.push(finding('NODE-HOST-LIBC', `${what}; this host has no ${lib.soname} (not in the ldconfig cache nor the standard library dirs)`));
      continue;
    }
    // The loader wants each needed version defined by name, as dlopen's "CXXABI_1.3.9 not found" says.
    for (const n of needed.filter((n) => !found.versions.includes(n.version))) {
      const highest = n.highest(found.versions);
      const provides = highest === undefined ? `no ${n.prefix} version` : `up to ${n.prefix}${highest}`;
      out.push(finding('NODE-HOST-LIBC', `${what}; this host's ${found.file} lacks ${n.version} (it provides ${provides})`));
    }
  }
  return out;
}
