/**
 * The symbol versions an ELF file needs from its libraries (.gnu.version_r, e.g. GLIBC_2.34 from
 * libc.so.6) and the ones it defines itself (.gnu.version_d, e.g. GLIBCXX_3.4.29 in libstdc++.so.6),
 * read from the section headers and the string tables they link to: what the dynamic loader checks
 * before it runs a program or dlopen()s a .node. No readelf/objdump (a build or node host may have
 * neither). Reads only the headers and those sections, so a 100 MB node binary costs a few KiB.
 * Packaging uses it for a package's glibc floor; the installer for the host's libstdc++.
 */
import { open } from 'node:fs/promises';

export interface ElfSymbolVersions {
  /** e_machine: 62 x86_64, 183 aarch64, … */
  machine: number;
  /** 32 or 64. */
  bits: 32 | 64;
  /** Per library (DT_NEEDED name): the version names it must define, e.g. libc.so.6 → [GLIBC_2.2.5, GLIBC_2.34]. */
  needed: Array<{ file: string; versions: string[] }>;
  /** Version names this file defines (not its own base name), e.g. GLIBCXX_3.4 … GLIBCXX_3.4.30. */
  defined: string[];
}

export const ELF_MACHINE_X86_64 = 62;
export const ELF_MACHINE_AARCH64 = 183;

const ELF_MAGIC = Buffer.from([0x7f, 0x45, 0x4c, 0x46]);
const SHT_GNU_VERDEF = 0x6ffffffd;
const SHT_GNU_VERNEED = 0x6ffffffe;
/** vd_flags of the entry that names the file itself, not a version it provides. */
const VER_FLG_BASE = 0x1;
/** Bounds against a damaged file looping or allocating without end. */
const MAX_SECTIONS = 65_535;
const MAX_SECTION_BYTES = 16 * 1024 * 1024;

/** Reads `length` bytes at `offset` (short at the end of the source). */
type ByteSource = (offset: number, length: number) => Promise<Buffer>;

interface Section {
  type: number;
  offset: number;
  size: number;
  link: number;
  info: number;
}

class ElfReader {
  constructor(
    private readonly bytes: Buffer,
    private readonly le: boolean,
  ) {}
  u16(at: number): number {
    return this.le ? this.bytes.readUInt16LE(at) : this.bytes.readUInt16BE(at);
  }
  u32(at: number): number {
    return this.le ? this.bytes.readUInt32LE(at) : this.bytes.readUInt32BE(at);
  }
  u64(at: number): number {
    const v = this.le ? this.bytes.readBigUInt64LE(at) : this.bytes.readBigUInt64BE(at);
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error('an ELF offset or size is out of range');
    return Number(v);
  }
}

function cString(table: Buffer, at: number): string {
  if (at >= table.length) throw new Error(`an ELF string offset (${at}) is outside its string table`);
  const end = table.indexOf(0, at);
  return table.toString('latin1', at, end < 0 ? table.length : end);
}

async function exactly(source: ByteSource, offset: number, length: number, what: string): Promise<Buffer> {
  if (length > MAX_SECTION_BYTES) throw new Error(`the ELF ${what} is ${length} bytes, more than a version table can be`);
  const b = await source(offset, length);
  if (b.length !== length) throw new Error(`the file ends inside the ELF ${what}`);
  return b;
}

/** Whether `head` (the file's first bytes) is an ELF file. */
export function isElf(head: Buffer): boolean {
  return head.length >= 4 && head.subarray(0, 4).equals(ELF_MAGIC);
}

async function readFrom(source: ByteSource): Promise<ElfSymbolVersions | undefined> {
  const ident = await source(0, 64);
  if (!isElf(ident)) return undefined;
  const bits = ident[4] === 1 ? 32 : ident[4] === 2 ? 64 : undefined;
  if (bits === undefined || (ident[5] !== 1 && ident[5] !== 2)) throw new Error('not a 32- or 64-bit ELF file of a known byte order');
  if (ident.length < (bits === 64 ? 64 : 52)) throw new Error('the file ends inside the ELF header');
  const h = new ElfReader(ident, ident[5] === 1);
  const machine = h.u16(18);
  const shoff = bits === 64 ? h.u64(0x28) : h.u32(0x20);
  const shentsize = h.u16(bits === 64 ? 0x3a : 0x2e);
  let shnum = h.u16(bits === 64 ? 0x3c : 0x30);
  if (shoff === 0) throw new Error('the ELF file has no section headers');
  if (shentsize < (bits === 64 ? 64 : 40)) throw new Error(`the ELF section header size ${shentsize} is too small`);
  const sectionAt = async (index: number): Promise<Section> => {
    const s = new ElfReader(await exactly(source, shoff + index * shentsize, shentsize, 'section header'), ident[5] === 1);
    return bits === 64
      ? { type: s.u32(4), offset: s.u64(0x18), size: s.u64(0x20), link: s.u32(0x28), info: s.u32(0x2c) }
      : { type: s.u32(4), offset: s.u32(0x10), size: s.u32(0x14), link: s.u32(0x18), info: s.u32(0x1c) };
  };
  // More than 0xff00 sections: the count is in section 0's sh_size.
  if (shnum === 0) shnum = (await sectionAt(0)).size;
  if (shnum > MAX_SECTIONS) throw new Error(`the ELF file claims ${shnum} sections`);
  const sections: Section[] = [];
  for (let i = 0; i < shnum; i++) sections.push(await sectionAt(i));
  const contents = async (s: Section, what: string): Promise<Buffer> => exactly(source, s.offset, s.size, what);
  const linkedStrings = async (s: Section): Promise<Buffer> => {
    const table = sections[s.link];
    if (table === undefined) throw new Error(`an ELF version section links to section ${s.link}, which does not exist`);
    return contents(table, 'string table');
  };

  const needed: ElfSymbolVersions['needed'] = [];
  const defined: string[] = [];
  for (const s of sections) {
    if (s.type === SHT_GNU_VERNEED) {
      const data = new ElfReader(await contents(s, '.gnu.version_r'), ident[5] === 1);
      const strings = await linkedStrings(s);
      // Elf_Verneed (16 bytes: version, cnt, file, aux, next) chained by vn_next, sh_info of them.
      let at = 0;
      for (let n = 0; n < s.info; n++) {
        const versions: string[] = [];
        const count = data.u16(at + 2);
        let aux = at + data.u32(at + 8);
        // Elf_Vernaux (16 bytes: hash, flags, other, name, next).
        for (let k = 0; k < count; k++) {
          versions.push(cString(strings, data.u32(aux + 8)));
          const next = data.u32(aux + 12);
          if (next === 0) break;
          aux += next;
        }
        needed.push({ file: cString(strings, data.u32(at + 4)), versions });
        const next = data.u32(at + 12);
        if (next === 0) break;
        at += next;
      }
    } else if (s.type === SHT_GNU_VERDEF) {
      const data = new ElfReader(await contents(s, '.gnu.version_d'), ident[5] === 1);
      const strings = await linkedStrings(s);
      // Elf_Verdef (20 bytes: version, flags, ndx, cnt, hash, aux, next); its first Elf_Verdaux names it.
      let at = 0;
      for (let n = 0; n < s.info; n++) {
        if ((data.u16(at + 2) & VER_FLG_BASE) === 0 && data.u16(at + 6) > 0) defined.push(cString(strings, data.u32(at + data.u32(at + 12))));
        const next = data.u32(at + 16);
        if (next === 0) break;
        at += next;
      }
    }
  }
  return { machine, bits, needed, defined };
}

/**
 * The symbol versions of the ELF file at `file`; undefined when it is no ELF file (a script, a
 * text file). Throws on an ELF file it cannot read (truncated, damaged).
 */
export async function readElfSymbolVersions(file: string): Promise<ElfSymbolVersions | undefined> {
  const handle = await open(file, 'r');
  try {
    return await readFrom(async (offset, length) => {
      const buffer = Buffer.alloc(length);
      let done = 0;
      while (done < length) {
        const { bytesRead } = await handle.read(buffer, done, length - done, offset + done);
        if (bytesRead === 0) break;
        done += bytesRead;
      }
      return buffer.subarray(0, done);
    });
  } finally {
    await handle.close();
  }
}

/** The same, for bytes in memory. */
export async function elfSymbolVersionsOf(bytes: Buffer): Promise<ElfSymbolVersions | undefined> {
  return readFrom(async (offset, length) => bytes.subarray(offset, offset + length));
}
