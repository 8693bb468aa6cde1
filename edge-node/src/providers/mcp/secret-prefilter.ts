/**
 * The quick test before the node's key for a tool server is searched for in an answer: whether the
 * bytes may hold the key in some form, or a piece of it of MIN_SECRET_CHARS or more (the redaction in
 * mcp-call.ts). Any MIN_SECRET_CHARS characters of the key hold one of its blocks (BLOCK_CHARS long,
 * starting at each multiple of BLOCK_STRIDE), so the bytes may hold the key only if they hold a
 * block in one of the forms an encoder writes it (secret-forms.ts).
 *
 * A short key's blocks are searched for one by one: a block of letters and digits as it is (every
 * form writes those as they are), any other in its forms (one regex). A long key (a 2 KiB token has
 * 680 blocks) would cost a search per block, and a block with a '-', '_' or '.' one regex each; its
 * letters and digits alone would be two or three characters that ordinary text holds. Instead the
 * answer's escapes are decoded once (JSON's and HTML's: every form turns back into the key as
 * written) and every block is looked for in one pass over that (a rolling code of the last
 * BLOCK_CHARS characters, checked against a set). Built once per key.
 */
import { secretForms } from './secret-forms.js';

/** Keys shorter than this are not searched for: they would match ordinary text. */
export const MIN_SECRET_CHARS = 8;
const BLOCK_STRIDE = 3;
const BLOCK_CHARS = MIN_SECRET_CHARS + 1 - BLOCK_STRIDE;
/** Up to this many blocks, a search per block is quicker than decoding the answer and the rolling pass. */
const SEARCHED_ONE_BY_ONE = 16;

export interface SecretPrefilter {
  mayHold(bytes: Buffer): boolean;
}

/**
 * A block's code: a rolling polynomial hash of its characters (ASCII) in 32-bit integer arithmetic
 * (Math.imul wraps as the hash needs; doubles and `%` made the pass several times slower). A code
 * is looked up in a small bitmap first, then in the set, then the characters are compared.
 */
const BASE = 0x01000193;
/** BASE^(BLOCK_CHARS - 1): what the character leaving the window weighed. */
const LEAVING = Array.from({ length: BLOCK_CHARS - 1 }).reduce<number>((weight) => Math.imul(weight, BASE), 1);
const BITMAP_BYTES = 8192;

function blockCode(block: string): number | undefined {
  let code = 0;
  for (let i = 0; i < block.length; i += 1) {
    const c = block.charCodeAt(i);
    if (c >= 128) return undefined;
    code = (Math.imul(code, BASE) + c) | 0;
  }
  return code;
}

interface Hashed {
  bitmap: Uint8Array;
  codes: Set<number>;
  blocks: Set<string>;
}

function bitOf(code: number): [number, number] {
  return [(code >>> 3) & (BITMAP_BYTES - 1), 1 << (code & 7)];
}

const ALNUM_BLOCK = /^[A-Za-z0-9]+$/;

export function secretPrefilter(secret: string): SecretPrefilter {
  const blocks = new Set<string>();
  for (let at = 0; at + BLOCK_CHARS <= secret.length; at += BLOCK_STRIDE) blocks.add(secret.slice(at, at + BLOCK_CHARS));
  // Half of a character past U+FFFF: its forms are not the halves' (no key has a reason to hold one).
  if ([...blocks].some((block) => /[\uD800-\uDFFF]/.test(block))) return { mayHold: (bytes) => bytes.length >= MIN_SECRET_CHARS };
  const searches: Array<(bytes: Buffer, latin1: () => string) => boolean> = [];
  const hashed: Hashed = { bitmap: new Uint8Array(BITMAP_BYTES), codes: new Set(), blocks: new Set() };
  // A key that holds an escape's first character could hold an escape as written, which decoding
  // the answer would turn into something else: its blocks are searched for one by one.
  const decodable = blocks.size > SEARCHED_ONE_BY_ONE && !secret.includes('\\') && !secret.includes('&');
  for (const block of blocks) {
    const code = decodable ? blockCode(block) : undefined;
    if (code !== undefined) {
      const [byte, bit] = bitOf(code);
      hashed.bitmap[byte]! |= bit;
      hashed.codes.add(code);
      hashed.blocks.add(block);
    }
    else if (ALNUM_BLOCK.test(block)) searches.push((bytes) => bytes.includes(block));
    else {
      const forms = new RegExp(secretForms(block).source);
      searches.push((_bytes, latin1) => forms.test(latin1()));
    }
  }
  return {
    mayHold(bytes: Buffer): boolean {
      if (bytes.length < MIN_SECRET_CHARS) return false;
      let text: string | undefined;
      const latin1 = (): string => (text ??= bytes.toString('latin1'));
      if (hashed.blocks.size > 0 && holdsBlock(decodeEscapes(latin1()), hashed)) return true;
      return searches.some((search) => search(bytes, latin1));
    },
  };
}

/** Every JSON and HTML escape secretForms names, decoded; what is not ASCII after it does not matter here. */
const ESCAPE = /\\(["\\/bfnrt])|\\u([0-9a-fA-F]{4})|&#0*(\d{1,7});|&#[xX]0*([0-9a-fA-F]{1,6});|&(amp|lt|gt|quot|apos);/g;
const SHORT_ESCAPES: Readonly<Record<string, string>> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
const NAMED: Readonly<Record<string, string>> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

function decodeEscapes(text: string): string {
  if (!text.includes('\\') && !text.includes('&')) return text;
  return text.replace(ESCAPE, (_all, short?: string, unit?: string, decimal?: string, hex?: string, named?: string) => {
    if (short !== undefined) return SHORT_ESCAPES[short]!;
    if (named !== undefined) return NAMED[named]!;
    const code = unit !== undefined ? parseInt(unit, 16) : decimal !== undefined ? Number(decimal) : parseInt(hex!, 16);
    // Only ASCII is looked for in this pass (a block with more is searched in its forms).
    return code < 128 ? String.fromCharCode(code) : '\u0080';
  });
}

/** Whether some BLOCK_CHARS characters in a row of `text` are one of the hashed blocks. */
function holdsBlock(text: string, { bitmap, codes, blocks }: Hashed): boolean {
  let code = 0;
  let run = 0;
  for (let i = 0; i < text.length; i += 1) {
    const c = text.charCodeAt(i);
    if (c >= 128) {
      run = 0;
      code = 0;
      continue;
    }
    // The character that left the window drops out (once the window is full), the new one comes in.
    if (run >= BLOCK_CHARS) code = (code - Math.imul(text.charCodeAt(i - BLOCK_CHARS), LEAVING)) | 0;
    code = (Math.imul(code, BASE) + c) | 0;
    run += 1;
    if (run < BLOCK_CHARS || (bitmap[(code >>> 3) & (BITMAP_BYTES - 1)]! & (1 << (code & 7))) === 0) continue;
    if (codes.has(code) && blocks.has(text.slice(i + 1 - BLOCK_CHARS, i + 1))) return true;
  }
  return false;
}

const prefilters = new Map<string, SecretPrefilter>();
/** Tool servers' keys are few: the built prefilters are kept, and dropped all at once past this many. */
const MAX_KEPT = 256;

/** The prefilter of `secret`, built on its first use. */
export function prefilterOf(secret: string): SecretPrefilter {
  let prefilter = prefilters.get(secret);
  if (prefilter === undefined) {
    if (prefilters.size >= MAX_KEPT) prefilters.clear();
    prefilter = secretPrefilter(secret);
    prefilters.set(secret, prefilter);
  }
  return prefilter;
}
