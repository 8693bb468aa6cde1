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
 * letters and digits alone would be two or three characters that ordinary text holds. Instead every
 * block is looked for in one pass over the answer as written, and, when it holds an escape of one
 * of the key's characters, in one more with those escapes decoded on the way (every form turns back
 * into the key as written): a rolling code of the last BLOCK_CHARS characters, checked against a
 * set. An answer escaping a letter or digit as `\u00XX` (any character, for a key beyond ASCII) is
 * searched once more with every `\uXXXX` escape decoded: an encoder that escapes every character
 * writes the key's letters and digits so, and JSON.parse reads them back as the key. Built once per key.
 */
import { AMPERSAND, BACKSLASH, escapeAt, escapeLength, shortEscapeOf } from './secret-escapes.js';
import { builtPerKey } from './built-per-key.js';
import { escapesOfSecret, secretForms } from './secret-forms.js';

/** Keys shorter than this are not searched for: they would match ordinary text. */
export const MIN_SECRET_CHARS = 8;
const BLOCK_STRIDE = 3;
const BLOCK_CHARS = MIN_SECRET_CHARS + 1 - BLOCK_STRIDE;
/** Up to this many blocks, a search per block is quicker than decoding the answer and the rolling pass. */
const SEARCHED_ONE_BY_ONE = 16;

export interface SecretPrefilter {
  mayHold(bytes: Buffer): boolean;
  /** By character code: 1 for the key's ASCII characters other than letters and digits (the ones an escape may write). */
  escaped: Uint8Array;
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
  /** Any JSON and any HTML escape of one of the key's characters (undefined: it has only letters and digits, never escaped). */
  escapes: { json: RegExp; html: RegExp } | undefined;
  /** By character code: 1 for the key's characters other than letters and digits (the ones an escape may write). */
  escaped: Uint8Array;
}

function bitOf(code: number): [number, number] {
  return [(code >>> 3) & (BITMAP_BYTES - 1), 1 << (code & 7)];
}

const ALNUM_BLOCK = /^[A-Za-z0-9]+$/;

export function secretPrefilter(secret: string): SecretPrefilter {
  const blocks = new Set<string>();
  for (let at = 0; at + BLOCK_CHARS <= secret.length; at += BLOCK_STRIDE) blocks.add(secret.slice(at, at + BLOCK_CHARS));
  const escaped = new Uint8Array(128);
  for (const char of secret) if (char.charCodeAt(0) < 128 && !/^[A-Za-z0-9]$/.test(char)) escaped[char.charCodeAt(0)] = 1;
  // Half of a character past U+FFFF: its forms are not the halves' (no key has a reason to hold one).
  if ([...blocks].some((block) => /[\uD800-\uDFFF]/.test(block))) return { mayHold: (bytes) => bytes.length >= MIN_SECRET_CHARS, escaped };
  const searches: Array<(bytes: Buffer, latin1: () => string) => boolean> = [];
  const hashed: Hashed = { bitmap: new Uint8Array(BITMAP_BYTES), codes: new Set(), blocks: new Set(), escapes: escapesOfSecret(secret), escaped };
  // A key that holds an escape's first character could hold an escape as written, which decoding
  // the answer would turn into something else, and one that holds a ';' could start with an HTML
  // escape's end (`lt;…`), which a stray '&' before it and the decoding would eat: their blocks are
  // searched for one by one, in their forms as written.
  const decodable = blocks.size > SEARCHED_ONE_BY_ONE && !secret.includes('\\') && !secret.includes('&') && !secret.includes(';');
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
  const beyondAscii = [...secret].some((char) => char.charCodeAt(0) >= 128);
  const holdsAsWritten = (bytes: Buffer, latin1: () => string): boolean => {
    if (hashed.blocks.size > 0 && holdsBlock(latin1(), hashed)) return true;
    return searches.some((search) => search(bytes, latin1));
  };
  return {
    escaped,
    mayHold(bytes: Buffer): boolean {
      if (bytes.length < MIN_SECRET_CHARS) return false;
      let text: string | undefined;
      const latin1 = (): string => (text ??= bytes.toString('latin1'));
      if (holdsAsWritten(bytes, latin1)) return true;
      // A JSON encoder may write any character as `\uXXXX`, the key's letters and digits too (one
      // that escapes everything; JSON.parse reads them as the key): the same search once more over
      // the answer with those escapes decoded. Only when it escapes a letter or digit (the escapes
      // of the key's other characters are read above), or any character for a key beyond ASCII:
      // Python escapes every character past ASCII, which must not double the cost of its answers.
      const escapes = beyondAscii
        ? bytes.includes(UNICODE_ESCAPE_START)
        : bytes.includes(ASCII_ESCAPE_START) && LETTER_OR_DIGIT_ESCAPE.test(latin1());
      const decoded = escapes ? unicodeEscapesDecoded(bytes) : undefined;
      if (decoded === undefined) return false;
      let decodedText: string | undefined;
      return holdsAsWritten(decoded, () => (decodedText ??= decoded.toString('latin1')));
    },
  };
}

const UNICODE_ESCAPE_START = Buffer.from('\\u', 'latin1');
const ASCII_ESCAPE_START = Buffer.from('\\u00', 'latin1');

/** A `\u00XX` escape of an ASCII letter or digit (after an escaped backslash too: a false alarm costs a pass, never a miss). */
const LETTER_OR_DIGIT_ESCAPE = /\\u00(?:3[0-9]|[46][1-9A-Fa-f]|[57][0-9Aa])/;

/**
 * `bytes` (UTF-8) with each JSON `\uXXXX` escape written as the UTF-8 of the character it stands for
 * (a surrogate pair as one character), in one pass; undefined when there is none. An escaped
 * backslash (`\\u0041`) starts no escape. The result is never longer than `bytes`.
 */
function unicodeEscapesDecoded(bytes: Buffer): Buffer | undefined {
  if (bytes.indexOf(UNICODE_ESCAPE_START) === -1) return undefined;
  let out: Buffer | undefined;
  let length = 0;
  let copied = 0;
  for (let at = bytes.indexOf(BACKSLASH); at !== -1 && at + 1 < bytes.length;) {
    // Another escape (`\\`, `\"`, `\n`) takes the character after its backslash along.
    const unit = bytes[at + 1] === LOWER_U ? hexUnit(bytes, at + 2) : -1;
    if (unit < 0) {
      at = bytes.indexOf(BACKSLASH, at + 2);
      continue;
    }
    let code = unit;
    let end = at + 6;
    if (unit >= 0xd800 && unit < 0xdc00 && bytes[end] === BACKSLASH && bytes[end + 1] === LOWER_U) {
      const low = hexUnit(bytes, end + 2);
      if (low >= 0xdc00 && low < 0xe000) {
        code = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
        end += 6;
      }
    }
    out ??= Buffer.allocUnsafe(bytes.length);
    length += bytes.copy(out, length, copied, at);
    length = writeUtf8(out, length, code);
    copied = end;
    at = bytes.indexOf(BACKSLASH, end);
  }
  if (out === undefined) return undefined;
  length += bytes.copy(out, length, copied);
  return out.subarray(0, length);
}

const LOWER_U = 0x75;

/** The UTF-16 unit the four hex digits at `at` write, -1 when they are not four hex digits. */
function hexUnit(bytes: Buffer, at: number): number {
  if (at + 4 > bytes.length) return -1;
  let value = 0;
  for (let i = at; i < at + 4; i += 1) {
    const digit = hexDigitOf(bytes[i]!);
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

function hexDigitOf(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x41 && c <= 0x46) return c - 0x37;
  if (c >= 0x61 && c <= 0x66) return c - 0x57;
  return -1;
}

/** Writes `code`'s UTF-8 (a lone surrogate as its three bytes) into `out` at `at`; returns where it ends. */
function writeUtf8(out: Buffer, at: number, code: number): number {
  if (code < 0x80) {
    out[at] = code;
    return at + 1;
  }
  if (code < 0x800) {
    out[at] = 0xc0 | (code >> 6);
    out[at + 1] = 0x80 | (code & 0x3f);
    return at + 2;
  }
  if (code < 0x10000) {
    out[at] = 0xe0 | (code >> 12);
    out[at + 1] = 0x80 | ((code >> 6) & 0x3f);
    out[at + 2] = 0x80 | (code & 0x3f);
    return at + 3;
  }
  out[at] = 0xf0 | (code >> 18);
  out[at + 1] = 0x80 | ((code >> 12) & 0x3f);
  out[at + 2] = 0x80 | ((code >> 6) & 0x3f);
  out[at + 3] = 0x80 | (code & 0x3f);
  return at + 4;
}

/** Whether some BLOCK_CHARS characters in a row of `text` are one of the hashed blocks: as written, or with its escapes decoded. */
function holdsBlock(text: string, hashed: Hashed): boolean {
  if (holdsBlockAsWritten(text, hashed)) return true;
  // Decoding matters only where an escape writes one of the key's characters (a `\n` or `&&` in
  // code does not): a regex search per kind rules most answers out, and only such escapes are
  // decoded, so a stray `\` before a key that starts `n` is read as written (the key holds no `\`
  // or `;`, so no escape it has no part in can end inside it and none it has a part in can start there).
  if (hashed.escapes === undefined) return false;
  const kinds = (hashed.escapes.json.test(text) ? JSON_ESCAPES : 0) | (hashed.escapes.html.test(text) ? HTML_ESCAPES : 0);
  return kinds !== 0 && holdsBlockDecoded(text, hashed, kinds);
}

function holdsBlockAsWritten(text: string, { bitmap, codes, blocks }: Hashed): boolean {
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

/**
 * The same pass over the characters `text` stands for once each JSON and HTML escape secretForms
 * names that writes one of the key's characters is read as that character (`\"`, `\u002F`, `&lt;`,
 * `&#47;`), decoded on the way in one loop: a replace with a callback per escape took half a second
 * on an answer full of them.
 */
function holdsBlockDecoded(text: string, { bitmap, codes, blocks, escaped }: Hashed, kinds: number): boolean {
  const window = new Uint8Array(BLOCK_CHARS);
  let oldest = 0;
  let code = 0;
  let run = 0;
  let i = 0;
  while (i < text.length) {
    let c = text.charCodeAt(i);
    let length = 1;
    if ((c === BACKSLASH && (kinds & JSON_ESCAPES) !== 0) || (c === AMPERSAND && (kinds & HTML_ESCAPES) !== 0)) {
      // A JSON text carried in a JSON string (a tool's result that is a JSON dump) escapes the key's
      // escapes once more (`\\u002F`, `\\/`, `\\\"`): read as the character they write too.
      let decoded = c === BACKSLASH ? twiceEscapedAt(text, i) : -1;
      let decodedLength = twiceEscapedLength;
      if (decoded < 0 || escaped[decoded] !== 1) {
        decoded = escapeAt(text, i);
        decodedLength = escapeLength;
      }
      if (decoded >= 0 && decoded < 128 && escaped[decoded] === 1) {
        c = decoded;
        length = decodedLength;
      }
    }
    i += length;
    if (c >= 128) {
      run = 0;
      code = 0;
      continue;
    }
    if (run >= BLOCK_CHARS) code = (code - Math.imul(window[oldest]!, LEAVING)) | 0;
    window[oldest] = c;
    oldest = oldest + 1 === BLOCK_CHARS ? 0 : oldest + 1;
    code = (Math.imul(code, BASE) + c) | 0;
    run += 1;
    if (run < BLOCK_CHARS || (bitmap[(code >>> 3) & (BITMAP_BYTES - 1)]! & (1 << (code & 7))) === 0) continue;
    if (codes.has(code) && blocks.has(windowText(window, oldest))) return true;
  }
  return false;
}

/** How many characters the escape twiceEscapedAt last read spans. */
let twiceEscapedLength = 0;

/**
 * The character a JSON escape escaped once more writes at `at`, -1 when none starts there: its
 * backslash escaped (`\\\\` or `\\u005C`), then what followed it as written (`\\\\/`, `\\\\u002F`,
 * `\\\\n`) or escaped too (`\\\\\\/`, PHP's json_encode twice; `\\u005C\\u0022`); `\\\\u0026#47;` included
 * (an HTML escape whose & was JSON-escaped, then escaped once more).
 */
function twiceEscapedAt(text: string, at: number): number {
  if (escapeAt(text, at) !== BACKSLASH) return -1;
  const after = at + escapeLength;
  const next = text.charCodeAt(after);
  if (next === 0x75 /* u */) {
    // escapeAt reads the \uXXXX the escaped backslash began (and an HTML escape after a \u0026).
    const value = escapeLength === 2 ? escapeAt(text, at + 1) : -1;
    twiceEscapedLength = 1 + escapeLength;
    return value;
  }
  let short = next;
  let length = 1;
  if (next === BACKSLASH) {
    short = escapeAt(text, after);
    length = escapeLength;
    if (short < 0) return -1;
  }
  const value = short < 128 ? shortEscapeOf(short) : -1;
  if (value >= 0) twiceEscapedLength = after - at + length;
  return value;
}

function windowText(window: Uint8Array, oldest: number): string {
  let text = '';
  for (let k = 0; k < BLOCK_CHARS; k += 1) text += String.fromCharCode(window[(oldest + k) % BLOCK_CHARS]!);
  return text;
}

/** The kinds of escape holdsBlockDecoded decodes. */
const JSON_ESCAPES = 1;
const HTML_ESCAPES = 2;
/** The prefilter of `secret`, built on its first use. */
export const prefilterOf: (secret: string) => SecretPrefilter = builtPerKey(secretPrefilter);
