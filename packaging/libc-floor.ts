/**
 * The glibc floor of a release: the highest GLIBC_x.y, GLIBCXX_3.4.z, CXXABI_1.3.x and GCC_x.y
 * symbol versions that its ELF files (the carried runtime's bin/node, better-sqlite3's .node) need,
 * read from each file's .gnu.version_r. The .node is compiled on the build host, so it needs that
 * host's glibc and libstdc++ (Debian 12: GLIBC_2.34, GLIBCXX_3.4.29) even where Node itself needs
 * much less; CXXABI (libstdc++'s C++ ABI runtime) and GCC (libgcc_s.so.1) are versioned apart from
 * GLIBCXX, so a host can have one and lack the other. The floor goes into the signed manifest and
 * the installer refuses a host below it before any write.
 */
import { elfSymbolVersionsOf, readElfSymbolVersions } from '../installer/src/host/elf-symbol-versions.js';
import { compareDottedVersions, highestCxxabi, highestGcc, highestGlibc, highestGlibcxx } from '../installer/src/package/libc-requirements.js';
import type { LibcRequirements } from '../installer/src/package/libc-requirements.js';
import type { PackageEntry } from './zpkg/write-package.js';

export interface LibcFloor {
  requires: LibcRequirements;
  /** Which file sets each part of the floor (for the build log). */
  from: { [K in keyof LibcRequirements]?: string };
}

const PARTS: Array<[keyof LibcRequirements, (names: string[]) => string | undefined]> = [
  ['glibc', highestGlibc],
  ['glibcxx', highestGlibcxx],
  ['cxxabi', highestCxxabi],
  ['gcc', highestGcc],
];

/** The floor over every ELF file among `entries`; `requires` is {} when none needs glibc. */
export async function libcFloor(entries: readonly PackageEntry[]): Promise<LibcFloor> {
  const floor: LibcFloor = { requires: {}, from: {} };
  for (const entry of entries) {
    // Only the headers and version sections are read: the runtime's node is ~100 MB.
    const read = Buffer.isBuffer(entry.content) ? elfSymbolVersionsOf(entry.content) : readElfSymbolVersions(entry.content.file);
    const elf = await read.catch((err: Error) => {
      throw new Error(`${entry.path}: cannot read its ELF symbol versions: ${err.message}`);
    });
    if (elf === undefined) continue;
    const names = elf.needed.flatMap((n) => n.versions);
    for (const [part, highest] of PARTS) {
      const version = highest(names);
      const floorSoFar = floor.requires[part];
      if (version !== undefined && (floorSoFar === undefined || compareDottedVersions(version, floorSoFar) > 0)) {
        floor.requires[part] = version;
        floor.from[part] = entry.path;
      }
    }
  }
  return floor;
}

/** The floor as the build log prints it: each part with the file that sets it. */
export function describeLibcFloor(floor: LibcFloor): string {
  const prefix: Record<keyof LibcRequirements, string> = { glibc: 'glibc ≥ ', glibcxx: 'GLIBCXX_', cxxabi: 'CXXABI_', gcc: 'GCC_' };
  return PARTS.map(([part]) => `${prefix[part]}${floor.requires[part] ?? '(none)'} (${floor.from[part] ?? '-'})`).join(', ');
}
