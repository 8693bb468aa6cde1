/**
 * The JSON and HTML escapes secretForms names (`\"`, `\\`, `\/`, `\n`…, `\u0026`, `&amp;`, `&#38;`,
 * `&#x26;`), read one at a time where they start: for the key prefilter's pass over an answer
 * (secret-prefilter.ts), and for finding the key's pieces in a text that escapes them (mcp-call.ts).
 */
export const BACKSLASH = 0x5c;
export const AMPERSAND = 0x26;
/** JSON's two-character escapes: the character after the backslash → the one it writes (-1: none). */
const SHORT_ESCAPES = new Int16Array(128).fill(-1);
for (const [after, writes] of [[0x22, 0x22], [0x5c, 0x5c], [0x2f, 0x2f], [0x62, 0x08], [0x66, 0x0c], [0x6e, 0x0a], [0x72, 0x0d], [0x74, 0x09]] as const) SHORT_ESCAPES[after] = writes;
/** How many characters the escape escapeAt last read spans (a module variable: no tuple per escape). */
export let escapeLength = 0;

/** The character the escape at `at` writes (`\…` or `&…;`), -1 when none starts there. */
export function escapeAt(text: string, at: number): number {
  const next = text.charCodeAt(at + 1);
  if (text.charCodeAt(at) === BACKSLASH) {
    const short = next < 128 ? SHORT_ESCAPES[next]! : -1;
    if (short >= 0) {
      escapeLength = 2;
      return short;
    }
    if (next !== 0x75 /* u */) return -1;
    const unit = hexValue(text, at + 2, at + 6);
    if (unit < 0) return -1;
    escapeLength = 6;
    return unit;
  }
  if (next !== 0x23 /* # */) return namedAt(text, at, next);
  // &#NNN; or &#xHH; with any number of leading zeros, as secretForms matches them.
  const hex = text.charCodeAt(at + 2) === 0x78 || text.charCodeAt(at + 2) === 0x58;
  let i = at + (hex ? 3 : 2);
  while (text.charCodeAt(i) === 0x30) i += 1;
  let end = i;
  while (end < text.length && end - i < 8 && (hex ? hexDigit(text.charCodeAt(end)) >= 0 : isDecimal(text.charCodeAt(end)))) end += 1;
  if (text.charCodeAt(end) !== 0x3b /* ; */ || (end === i && text.charCodeAt(i - 1) !== 0x30)) return -1;
  const value = end === i ? 0 : hex ? hexValue(text, i, end) : Number(text.slice(i, end));
  escapeLength = end + 1 - at;
  return value;
}

/** `&amp;`, `&lt;`, `&gt;`, `&quot;`, `&apos;` at `at` (`next` is the character after the `&`). */
function namedAt(text: string, at: number, next: number): number {
  let name: string;
  let value: number;
  if (next === 0x61 /* a */) [name, value] = text.startsWith('amp;', at + 1) ? ['amp;', 0x26] : ['apos;', 0x27];
  else if (next === 0x6c /* l */) [name, value] = ['lt;', 0x3c];
  else if (next === 0x67 /* g */) [name, value] = ['gt;', 0x3e];
  else if (next === 0x71 /* q */) [name, value] = ['quot;', 0x22];
  else return -1;
  if (!text.startsWith(name, at + 1)) return -1;
  escapeLength = 1 + name.length;
  return value;
}

function isDecimal(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function hexDigit(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x41 && c <= 0x46) return c - 0x37;
  if (c >= 0x61 && c <= 0x66) return c - 0x57;
  return -1;
}

/** The hex number text[from, to) writes, -1 when a character of it is not a hex digit (or it runs past the end). */
function hexValue(text: string, from: number, to: number): number {
  if (to > text.length) return -1;
  let value = 0;
  for (let i = from; i < to; i += 1) {
    const digit = hexDigit(text.charCodeAt(i));
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

/**
 * `text` with each escape that writes a character `writes` flags (by code) read as that character,
 * and where each character of the result starts in `text` (`starts[length]` is text's length);
 * undefined when it has no such escape. Other escapes are kept as written: a stray `\` before `n…`
 * or `&` before `lt;…` stays what it is.
 */
export function decodeEscapesOf(text: string, writes: Uint8Array): { text: string; starts: Uint32Array } | undefined {
  let parts: string[] | undefined;
  let starts: Uint32Array | undefined;
  // One typed array for the offsets (a boxed number per character cost hundreds of MB on a 20 MB string).
  let length = 0;
  let copied = 0;
  for (let i = 0; i < text.length; i += 1) {
    const c = text.charCodeAt(i);
    if (c !== BACKSLASH && c !== AMPERSAND) continue;
    const value = escapeAt(text, i);
    if (value < 0 || value >= writes.length || writes[value] !== 1) continue;
    parts ??= [];
    starts ??= new Uint32Array(text.length + 1);
    for (let k = copied; k < i; k += 1) starts[length++] = k;
    parts.push(text.slice(copied, i), String.fromCharCode(value));
    starts[length++] = i;
    i += escapeLength - 1;
    copied = i + 1;
  }
  if (parts === undefined || starts === undefined) return undefined;
  for (let k = copied; k <= text.length; k += 1) starts[length++] = k;
  parts.push(text.slice(copied));
  return { text: parts.join(''), starts };
}
