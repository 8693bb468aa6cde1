/**
 * Checks a SQLite WAL file's frames (https://www.sqlite.org/fileformat2.html#walformat) without
 * SQLite. SQLite's recovery keeps the frames up to the first one whose salts or cumulative
 * checksum do not match and silently drops that frame and everything after it (the whole WAL when
 * its header checksum is bad); the next read-write open then checkpoints the shorter database and
 * deletes the WAL. For a torn tail (the last frames of a crash or power loss) that is right; for a
 * damaged frame with committed transactions after it, it loses records of answers already sent and
 * the evidence with them. So this runs before any connection opens the spool, and the credit lease
 * book (billing/lease-store.ts), whose lost transactions are credit the node spent.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import os from 'node:os';

const WAL_HEADER_BYTES = 32;
const FRAME_HEADER_BYTES = 24;
const MAGIC_LITTLE_ENDIAN = 0x377f0682;
const MAGIC_BIG_ENDIAN = 0x377f0683;
const WAL_FORMAT_VERSION = 3007000;
/** Frames are read this many bytes at a time (whole frames), so a large WAL is never held at once. */
const READ_CHUNK_BYTES = 4 * 1024 * 1024;

interface Checksum {
  s0: number;
  s1: number;
}

const HOST_LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/**
 * SQLite's WAL checksum over `bytes` (a multiple of 8), continuing from `from`. Words in the host's
 * byte order are read through an Int32Array (4-aligned in the chunk buffer), several times faster
 * than a DataView over a WAL of tens of MB.
 */
function walChecksum(bytes: Buffer, littleEndian: boolean, from: Checksum): Checksum {
  let { s0, s1 } = from;
  if (littleEndian === HOST_LITTLE_ENDIAN && bytes.byteOffset % 4 === 0) {
    const words = new Int32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
    for (let i = 0; i < words.length; i += 2) {
      s0 = (s0 + (words[i] ?? 0) + s1) | 0;
      s1 = (s1 + (words[i + 1] ?? 0) + s0) | 0;
    }
  } else {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    for (let i = 0; i < bytes.byteLength; i += 8) {
      s0 = (s0 + view.getUint32(i, littleEndian) + s1) | 0;
      s1 = (s1 + view.getUint32(i + 4, littleEndian) + s0) | 0;
    }
  }
  return { s0: s0 >>> 0, s1: s1 >>> 0 };
}

function isValidPageSize(size: number): boolean {
  return size >= 512 && size <= 65536 && (size & (size - 1)) === 0;
}

/** What is wrong with a WAL (walkWal), and where. */
export interface WalDamage {
  /** What is wrong, naming the WAL. */
  problem: string;
  /** The frames before the first bad one (0 when the header is damaged): SQLite's recovery keeps none after them. */
  framesBeforeDamage: number;
  /** The WAL header's salts (bytes 16–24): the generation of the WAL the damage is in. */
  salts: Buffer;
}

/** One walk's verdict and the WAL it was read from. */
interface Walk {
  /** What is wrong (walkWal), or null. */
  damage: WalDamage | null;
  /** The WAL's 32-byte header and size when the walk began (empty: no WAL, or no frames). */
  header: Buffer;
  size: number;
  /** Header and size read again after the walk were the same: no writer started the WAL again or added to it meanwhile. */
  settled: boolean;
}

/** Walks before giving up on a WAL that changes under each of them. */
const MAX_WALKS = 8;

/**
 * What is wrong with the WAL at `walFile`, or null (also when there is none): see walkWal. A
 * replica may be writing the WAL while another one starts before it holds its owner slot (or
 * `status` reads it), and a walk that read the header before the writer started the WAL again and
 * frames after sees damage that is not there. So only a walk whose header and size are the same
 * after it counts, and damage only when two such walks see the same header, size and verdict. A WAL
 * that changes under every walk is being written: its writer's connection has recovered it.
 */
export function findWalDamage(walFile: string): string | null {
  return inspectWalDamage(walFile)?.problem ?? null;
}

/** findWalDamage with where the damage is, for a caller that asks whether a live connection already read past it (walIndexFrameCount). */
export function inspectWalDamage(walFile: string): WalDamage | null {
  let previous: Walk | undefined;
  for (let attempt = 0; attempt < MAX_WALKS; attempt++) {
    const walk = walkWal(walFile);
    if (!walk.settled) continue;
    if (walk.damage === null) return null;
    if (previous?.damage?.problem === walk.damage.problem && previous.size === walk.size && previous.header.equals(walk.header)) {
      return walk.damage;
    }
    previous = walk;
  }
  return null;
}

/** SQLite's wal-index header (WalIndexHdr, https://www.sqlite.org/walformat.html#the_wal_index_file_format), kept twice at the start of the -shm. */
const WAL_INDEX_HEADER_BYTES = 48;
const HOST_READS_LE = os.endianness() === 'LE';

/**
 * How many frames of the WAL whose header has `salts` the wal-index in `shmFile` (SQLite's -shm
 * beside it) counts as committed (its header's mxFrame), or undefined when it tells nothing sure:
 * no -shm, not initialised, its two header copies differ (being written), or another generation of
 * the WAL. A connection that recovered the WAL rebuilt the index from the frames its recovery kept,
 * and a live writer keeps it up to date as it commits; the index a killed writer left still counts
 * every frame that writer committed. The header is in the host's byte order (it is never moved
 * between hosts), the salts as the WAL header holds them.
 */
export function walIndexFrameCount(shmFile: string, salts: Buffer): number | undefined {
  const index = readWalIndex(shmFile);
  return index !== undefined && index.salts.equals(salts) ? index.mxFrame : undefined;
}

/** SQLite's checkpoint info (WalCkptInfo) follows the header's two copies in the -shm; nBackfill is its first field. */
const CHECKPOINT_INFO_OFFSET = 2 * WAL_INDEX_HEADER_BYTES;
/** Reads of the -shm and the WAL before giving up on a pair that changes under each of them. */
const MAX_SHORTFALL_READS = 8;
/**
 * How far (mod 2^32) a WAL's salt-1 may be ahead of the -shm's for a WAL whose header's checkpoint
 * sequence is above 0 to count as a later generation of the same one. A connection that starts the
 * WAL again itself (the first write after a full checkpoint, or its own TRUNCATE checkpoint) adds
 * one to its checkpoint count and to salt-1, each time only once every frame was copied into the
 * database: a -shm older than its WAL (one the kernel had not yet written back at a power loss) is
 * a few restarts behind, far fewer than 65536. Another spool's WAL, one started again by its own
 * connection, has a salt-1 unrelated to the -shm's: a window of 2^31 took half of those for a later
 * generation and hid the loss; this one takes one in 65536. A WAL whose checkpoint sequence is 0 has
 * random salts (walChecksOutAsLaterGeneration): only a -shm this far ahead of it tells (an older WAL).
 */
const MAX_GENERATIONS_AHEAD = 0x10000;

/** What a -shm's wal-index says of its WAL (readWalIndex). */
interface WalIndexView {
  /** The last committed frame (WalIndexHdr.mxFrame). */
  mxFrame: number;
  /** Frames already copied into the database (WalCkptInfo.nBackfill). */
  nBackfill: number;
  pageSize: number;
  /** aSalt as the WAL header holds them (bytes 16–24). */
  salts: Buffer;
  /** The bytes read, to tell whether the -shm changed while the WAL was looked at. */
  raw: Buffer;
}

/** The -shm's wal-index header and nBackfill, or undefined when it tells nothing sure (absent, short, not initialised, its two header copies differ). */
function readWalIndex(shmFile: string): WalIndexView | undefined {
  let fd: number;
  try {
    fd = openSync(shmFile, 'r');
  } catch {
    return undefined;
  }
  try {
    const raw = Buffer.alloc(CHECKPOINT_INFO_OFFSET + 4);
    if (readSync(fd, raw, 0, raw.length, 0) < raw.length) return undefined;
    const header = raw.subarray(0, WAL_INDEX_HEADER_BYTES);
    if (!header.equals(raw.subarray(WAL_INDEX_HEADER_BYTES, CHECKPOINT_INFO_OFFSET))) return undefined;
    const u32 = (offset: number): number => (HOST_READS_LE ? raw.readUInt32LE(offset) : raw.readUInt32BE(offset));
    if (u32(0) !== WAL_FORMAT_VERSION || header[12] !== 1) return undefined;
    // szPage keeps a 65536-byte page as 1 (wal.c: walPagesize).
    const szPage = HOST_READS_LE ? header.readUInt16LE(14) : header.readUInt16BE(14);
    const pageSize = (szPage & 0xfe00) + ((szPage & 1) << 16);
    if (!isValidPageSize(pageSize)) return undefined;
    return { mxFrame: u32(16), nBackfill: u32(CHECKPOINT_INFO_OFFSET), pageSize, salts: Buffer.from(header.subarray(32, 40)), raw };
  } finally {
    closeSync(fd);
  }
}

/** The WAL's header and size, or null when there is none. */
function readWalHead(walFile: string): { header: Buffer; size: number } | null {
  let fd: number;
  try {
    fd = openSync(walFile, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  try {
    return readHeader(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Committed transactions the WAL at `walFile` no longer holds although the wal-index in `shmFile`
 * (its -shm) counts them, or null. A writer killed -9 leaves the -shm as it was: its header's
 * mxFrame is the last frame committed, its checkpoint info's nBackfill the last one copied into the
 * database; frames between are committed transactions that exist only in the WAL. SQLite's first
 * connection rebuilds the -shm from whatever WAL it finds (none, or one cut short) without a word,
 * so this must run before any connection opens the database. Not a loss: no -shm, or one that tells
 * nothing sure (readWalIndex); every frame copied (nBackfill == mxFrame: what a clean close or a
 * full checkpoint leaves); a WAL of another generation than the -shm's that may be a later one
 * (walChecksOutAsLaterGeneration). A loss: no WAL, an empty one, one cut short below mxFrame, and a
 * WAL of another generation that cannot be a later one (an older one, or another spool's that its
 * own connection started again).
 */
export function findWalShortfall(walFile: string, shmFile: string): string | null {
  for (let attempt = 0; attempt < MAX_SHORTFALL_READS; attempt++) {
    const index = readWalIndex(shmFile);
    if (index === undefined) return null;
    if (index.mxFrame === 0 || index.nBackfill >= index.mxFrame) return null;
    const wal = readWalHead(walFile);
    // A writer of the -shm is at work (its header changed meanwhile): it has recovered the WAL itself.
    const again = readWalIndex(shmFile);
    if (again === undefined || !again.raw.equals(index.raw)) continue;
    const uncopied = index.mxFrame - index.nBackfill;
    const counted =
      `its -shm (${shmFile}), left by a node-edge that did not stop cleanly, counts ${index.mxFrame} committed WAL frames of which ${uncopied} ` +
      `(frames ${index.nBackfill + 1}–${index.mxFrame}) were not yet copied into the database`;
    const lost = 'the transactions in them (records of answers already sent) are lost: SQLite opens the database without them';
    if (wal === null || wal.size < WAL_HEADER_BYTES || wal.header.length < WAL_HEADER_BYTES) {
      return `lost committed transactions: its WAL (${walFile}) is ${wal === null ? 'missing' : 'empty'}, but ${counted}; ${lost}`;
    }
    const walSalts = wal.header.subarray(16, 24);
    if (!walSalts.equals(index.salts)) {
      if (walChecksOutAsLaterGeneration(wal.header, index.salts)) return null;
      return `lost committed transactions: its WAL (${walFile}) is not the one its -shm was written with (an older WAL, or another spool's, is in its place), and ${counted}; ${lost}`;
    }
    const held = Math.floor((wal.size - WAL_HEADER_BYTES) / (FRAME_HEADER_BYTES + index.pageSize));
    if (held >= index.mxFrame) return null;
    const missing = index.mxFrame - Math.max(held, index.nBackfill);
    return `lost committed transactions: its WAL (${walFile}) is cut short, holding ${held} whole frames, but ${counted}; ${lost} (${missing} frames gone)`;
  }
  return null;
}

/**
 * Whether a WAL with `walHeader`, whose salts differ from `shmSalts` (those of the WAL the -shm was
 * written with), may be a later generation of that WAL, every frame the -shm counts then copied into
 * the database before it was started again. SQLite writes a new WAL header (sqlite3WalFrames) with
 * the writing connection's checkpoint count (bytes 12–15) and, when that count is 0, salts drawn at
 * random. Checkpoint sequence above 0: the WAL was started again by the connection that writes it
 * (walRestartHdr: salt-1 + 1, count + 1), so a later generation has salt-1 a few steps ahead
 * (MAX_GENERATIONS_AHEAD). Checkpoint sequence 0: salts random, which tells nothing. Such a WAL is
 * either a later generation started again by another connection (one replica's TRUNCATE checkpoint,
 * spool-store.ts measure(), then another replica's write; or a connection of an earlier process),
 * or one created anew (the WAL deleted and made again, or another spool's first one put in its
 * place): the first is common with several replicas and a -shm left stale by a power loss, so it is
 * not named as a loss (unless the -shm's salt-1 is at most MAX_GENERATIONS_AHEAD ahead of the
 * WAL's: then the WAL is an older generation, as a random salt-1 lands there once in 65536), and a
 * WAL created anew in place of a killed node's goes unnoticed here. Still
 * named as a loss although none is: a -shm two or more generations behind a WAL that its writer
 * started again itself after a generation another connection started (salt-1 then counts on from a
 * random one).
 */
function walChecksOutAsLaterGeneration(walHeader: Buffer, shmSalts: Buffer): boolean {
  // Not a WAL header at all (zeros, another file's bytes): its checkpoint sequence tells nothing.
  const magic = walHeader.readUInt32BE(0);
  if (magic !== MAGIC_LITTLE_ENDIAN && magic !== MAGIC_BIG_ENDIAN) return false;
  const ahead = (walHeader.readUInt32BE(16) - shmSalts.readUInt32BE(0)) >>> 0;
  // The -shm a few restarts ahead of the WAL: an older generation, whatever the WAL's checkpoint sequence.
  const behind = (0x100000000 - ahead) % 0x100000000;
  if (behind > 0 && behind <= MAX_GENERATIONS_AHEAD) return false;
  if (walHeader.readUInt32BE(12) === 0) return true;
  return ahead > 0 && ahead <= MAX_GENERATIONS_AHEAD;
}

/** The WAL's first 32 bytes (fewer when it is shorter) and size, read through `fd`. */
function readHeader(fd: number): { header: Buffer; size: number } {
  const size = fstatSync(fd).size;
  const header = Buffer.from(new ArrayBuffer(WAL_HEADER_BYTES));
  const read = readSync(fd, header, 0, WAL_HEADER_BYTES, 0);
  return { header: header.subarray(0, read), size };
}

/**
 * What is wrong with the WAL at `walFile` that SQLite's recovery would drop committed transactions
 * for, or null when nothing is: an empty or header-only WAL, frames with older salts after the
 * current ones (left from before the WAL was restarted after a checkpoint), and a torn tail (the
 * last frames incomplete or bad, with no committed transaction after them) are all normal.
 */
function walkWal(walFile: string): Walk {
  let fd: number;
  try {
    fd = openSync(walFile, 'r');
  } catch (err) {
    // No WAL: nothing to lose.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { damage: null, header: Buffer.alloc(0), size: 0, settled: true };
    throw err;
  }
  try {
    const { header, size } = readHeader(fd);
    if (size <= WAL_HEADER_BYTES) return { damage: null, header, size, settled: true };
    // Cut below its header between the stat and the read: being written (or emptied) meanwhile.
    if (header.length < WAL_HEADER_BYTES) return { damage: null, header, size, settled: false };
    const found = walkFrames(walFile, fd, header, size);
    const damage = found === null ? null : { ...found, salts: Buffer.from(header.subarray(16, 24)) };
    const after = readHeader(fd);
    return { damage, header, size, settled: after.size === size && after.header.equals(header) };
  } finally {
    closeSync(fd);
  }
}

/** walkWal's verdict on the frames of a WAL that had `header` and `size` when it began. */
function walkFrames(walFile: string, fd: number, header: Buffer, size: number): Omit<WalDamage, 'salts'> | null {
  const magic = header.readUInt32BE(0);
  const pageSize = header.readUInt32BE(8);
  const littleEndian = magic === MAGIC_LITTLE_ENDIAN;
  const headerSum = walChecksum(header.subarray(0, 24), littleEndian, { s0: 0, s1: 0 });
  if (
    (magic !== MAGIC_LITTLE_ENDIAN && magic !== MAGIC_BIG_ENDIAN) ||
    header.readUInt32BE(4) !== WAL_FORMAT_VERSION ||
    !isValidPageSize(pageSize) ||
    headerSum.s0 !== header.readUInt32BE(24) ||
    headerSum.s1 !== header.readUInt32BE(28)
  ) {
    return { problem: `has a WAL (${walFile}) whose header is damaged, so SQLite would drop every transaction in it`, framesBeforeDamage: 0 };
  }
  const salts = header.subarray(16, 24);
  const frameBytes = FRAME_HEADER_BYTES + pageSize;
  const frameCount = Math.floor((size - WAL_HEADER_BYTES) / frameBytes);
  const chunk = Buffer.from(new ArrayBuffer(Math.max(1, Math.floor(READ_CHUNK_BYTES / frameBytes)) * frameBytes));
  let sum = headerSum;
  let firstBad: number | undefined;
  for (let start = 0; start < frameCount; ) {
    const frames = Math.min(frameCount - start, chunk.length / frameBytes);
    const read = readSync(fd, chunk, 0, frames * frameBytes, WAL_HEADER_BYTES + start * frameBytes);
    if (read < frames * frameBytes) break; // the file shrank meanwhile: what is left is a tail
    for (let i = 0; i < frames; i++) {
      const frame = chunk.subarray(i * frameBytes, (i + 1) * frameBytes);
      const hasCurrentSalts = frame.subarray(8, 16).equals(salts);
      if (firstBad === undefined) {
        const next = hasCurrentSalts
          ? walChecksum(frame.subarray(FRAME_HEADER_BYTES), littleEndian, walChecksum(frame.subarray(0, 8), littleEndian, sum))
          : undefined;
        if (next !== undefined && next.s0 === frame.readUInt32BE(16) && next.s1 === frame.readUInt32BE(20)) {
          sum = next;
        } else {
          firstBad = start + i;
        }
        // A commit frame (its "database size after commit" is set) of this WAL's generation after
        // the first bad frame: a committed transaction SQLite would drop. Uncommitted frames after
        // it are not evidence: a transaction killed before its commit may leave a frame it
        // rewrote in place with a stale checksum, and it lost nothing that was answered.
      } else if (hasCurrentSalts && frame.readUInt32BE(4) !== 0) {
        return {
          problem: `has a WAL (${walFile}) with a damaged frame (${firstBad + 1} of ${frameCount}) followed by committed transactions, which SQLite would drop`,
          framesBeforeDamage: firstBad,
        };
      }
    }
    start += frames;
  }
  return null;
}
