/**
 * The glibc floor of a release: the highest GLIBC_x.y and GLIBCXX_3.4.z symbol versions that its
 * ELF files (the carried runtime's bin/node, better-sqlite3's .node) need, read from each file's
 * .gnu.version_r. The .node is compiled on the build host, so it needs that host's glibc and
 * libstdc++ (Debian 12: GLIBC_2.34, GLIBCXX_3.4.29) even where Node itself needs much less; the
 * floor goes into the signed manifest and the installer refuses a host below it before any write.
 */
import { elfSymbolVersionsOf, readElfSymbolVersions } from '../installer/src/host/elf-symbol-versions.js';
import { compareDottedVersions, highestGlibc, highestGlibcxx } from '../installer/src/package/libc-requirements.js';
import type { LibcRequirements } from '../installer/src/package/libc-requirements.js';
import type { PackageEntry } from './zpkg/write-package.js';

export interface LibcFloor {
  requires: LibcRequirements;
  /** Which file sets each part of the floor (for the build log). */
  glibcFrom?: string;
  glibcxxFrom?: string;
}

/** The floor over every ELF file among `entries`; `requires` is {} when none needs glibc. */
export async function libcFloor(entries: readonly PackageEntry[]): Promise<LibcFloor> {
  const floor: LibcFloor = { requires: {} };
  for (const entry of entries) {
    // Only the headers and version sections are read: the runtime's node is ~100 MB.
    const read = Buffer.isBuffer(entry.content) ? elfSymbolVersionsOf(entry.content) : readElfSymbolVersions(entry.content.file);
    const elf = await read.catch((err: Error) => {
      throw new Error(`${entry.path}: cannot read its ELF symbol versions: ${err.message}`);
    });
    if (elf === undefined) continue;
    const names = elf.needed.flatMap((n) => n.versions);
    const glibc = highestGlibc(names);
    const glibcxx = highestGlibcxx(names);
    if (glibc !== undefined && (floor.requires.glibc === undefined || compareDottedVersions(glibc, floor.requires.glibc) > 0)) {
      floor.requires.glibc = glibc;
      floor.glibcFrom = entry.path;
    }
    if (glibcxx !== undefined && (floor.requires.glibcxx === undefined || compareDottedVersions(glibcxx, floor.requires.glibcxx) > 0)) {
      floor.requires.glibcxx = glibcxx;
      floor.glibcxxFrom = entry.path;
    }
  }
  return floor;
}
