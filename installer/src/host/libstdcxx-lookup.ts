/**
 * The host's C++ runtime libraries — libstdc++.so.6 and the libgcc_s.so.1 it and Node link — as the
 * dynamic loader would find them for the carried Node: first in the ldconfig cache
 * (/etc/ld.so.cache, what ld.so reads), then in the default dirs (multiarch and lib64), skipping
 * files of another architecture; and the symbol versions each defines (GLIBCXX_…, CXXABI_…; GCC_…).
 * Read-only.
 */
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import type { HostLibrary } from './host-probe.js';
import { ELF_MACHINE_AARCH64, ELF_MACHINE_X86_64, readElfSymbolVersions } from './elf-symbol-versions.js';

export const LD_SO_CACHE = '/etc/ld.so.cache';
const CACHE_MAGIC = Buffer.from('glibc-ld.so.cache1.1', 'latin1');
/** struct cache_file_new: magic + version (20), nlibs, len_strings, flags + padding, extension_offset, unused[3]. */
const CACHE_HEADER_BYTES = 48;
/** struct file_entry_new: flags, key, value, osversion (4 each), hwcap (8). */
const CACHE_ENTRY_BYTES = 24;

const MACHINE: Record<string, { elf: number; dirs: string[] }> = {
  x64: { elf: ELF_MACHINE_X86_64, dirs: ['/lib/x86_64-linux-gnu', '/usr/lib/x86_64-linux-gnu', '/lib64', '/usr/lib64', '/lib', '/usr/lib'] },
  arm64: { elf: ELF_MACHINE_AARCH64, dirs: ['/lib/aarch64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/lib64', '/usr/lib64', '/lib', '/usr/lib'] },
};

/**
 * The (name, path) entries of an ld.so.cache in its file order (ld.so's preference order). Old
 * caches carry the old format first and the new one after it; only the new one is read (glibc ≥ 2.32
 * writes only it; older ldconfig writes both). Offsets in it count from the new header.
 */
export function parseLdSoCache(bytes: Buffer): Array<{ name: string; path: string }> {
  const start = bytes.indexOf(CACHE_MAGIC);
  if (start < 0 || bytes.length < start + CACHE_HEADER_BYTES) return [];
  const le = os.endianness() === 'LE';
  const u32 = (at: number): number => (le ? bytes.readUInt32LE(at) : bytes.readUInt32BE(at));
  const nlibs = u32(start + 20);
  const str = (offset: number): string | undefined => {
    const at = start + offset;
    if (at >= bytes.length) return undefined;
    const end = bytes.indexOf(0, at);
    return bytes.toString('utf8', at, end < 0 ? bytes.length : end);
  };
  const out: Array<{ name: string; path: string }> = [];
  for (let i = 0; i < nlibs; i++) {
    const at = start + CACHE_HEADER_BYTES + i * CACHE_ENTRY_BYTES;
    if (at + CACHE_ENTRY_BYTES > bytes.length) break;
    const name = str(u32(at + 4));
    const path = str(u32(at + 8));
    if (name !== undefined && path !== undefined) out.push({ name, path });
  }
  return out;
}

export interface LibraryLookup {
  cacheFile?: string;
  dirs?: string[];
  /** process.arch of the program that would load it. */
  arch?: string;
}

/** The first `name` for this architecture in the ldconfig cache, else in the default dirs. */
export async function findSharedLibrary(name: string, lookup: LibraryLookup = {}): Promise<string | undefined> {
  const machine = MACHINE[lookup.arch ?? process.arch];
  if (machine === undefined) return undefined;
  const candidates: string[] = [];
  try {
    candidates.push(...parseLdSoCache(await readFile(lookup.cacheFile ?? LD_SO_CACHE)).filter((e) => e.name === name).map((e) => e.path));
  } catch {
    // No cache (some minimal hosts): ld.so searches the default dirs only.
  }
  candidates.push(...(lookup.dirs ?? machine.dirs).map((d) => `${d}/${name}`));
  for (const file of candidates) {
    try {
      const elf = await readElfSymbolVersions(file);
      // A 32-bit or foreign-arch copy (multilib) is skipped, as ld.so skips it.
      if (elf !== undefined && elf.bits === 64 && elf.machine === machine.elf) return file;
    } catch {
      // Missing or unreadable: the loader would go on to the next one too.
    }
  }
  return undefined;
}

async function hostLibrary(name: string, lookup: LibraryLookup): Promise<HostLibrary | undefined> {
  const file = await findSharedLibrary(name, lookup);
  if (file === undefined) return undefined;
  const elf = await readElfSymbolVersions(file);
  return { file, versions: elf?.defined ?? [] };
}

/** The host's libstdc++.so.6 and every version it defines (GLIBCXX_…, CXXABI_…); undefined when there is none. */
export async function hostLibstdcxx(lookup: LibraryLookup = {}): Promise<HostLibrary | undefined> {
  return hostLibrary('libstdc++.so.6', lookup);
}

/** The host's libgcc_s.so.1 and every version it defines (GCC_…); undefined when there is none. */
export async function hostLibgccS(lookup: LibraryLookup = {}): Promise<HostLibrary | undefined> {
  return hostLibrary('libgcc_s.so.1', lookup);
}
