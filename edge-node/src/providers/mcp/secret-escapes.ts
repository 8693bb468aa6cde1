/**
 * The JSON and HTML escapes secretForms names (`\"`, `\\`, `\/`, `\n`…, `\u0026`, `&amp;`, `&#38;`,
 * `&#x26;`, `&sol;`, and an HTML escape whose & is JSON-escaped: `\u0026#43;`), read one at a time
 * where they start: for the key prefilter's pass over an answer (secret-prefilter.ts), and for
 * finding the key's pieces in a text that escapes them (mcp-call.ts).
 */
export const BACKSLASH = 0x5c;
export const AMPERSAND = 0x26;
/**
 * HTML5's named character references that write an ASCII character, by name (between `&` and `;`):
 * an encoder may use any of them (PHP's htmlentities with ENT_HTML5 writes `&sol;`, `&period;`, `&plus;`).
 */
export const HTML_NAMED_REFERENCES: ReadonlyMap<string, number> = new Map<string, number>([
  ['Tab', 9], ['NewLine', 10], ['excl', 33], ['quot', 34], ['QUOT', 34], ['num', 35], ['dollar', 36], ['percnt', 37],
  ['amp', 38], ['AMP', 38], ['apos', 39], ['lpar', 40], ['rpar', 41], ['ast', 42], ['midast', 42], ['plus', 43],
  ['comma', 44], ['period', 46], ['sol', 47], ['colon', 58], ['semi', 59], ['lt', 60], ['LT', 60], ['equals', 61],
  ['gt', 62], ['GT', 62], ['quest', 63], ['commat', 64], ['lsqb', 91], ['lbrack', 91], ['bsol', 92], ['rsqb', 93],
  ['rbrack', 93], ['Hat', 94], ['lowbar', 95], ['UnderBar', 95], ['grave', 96], ['DiacriticalGrave', 96],
  ['lcub', 123], ['lbrace', 123], ['verbar', 124], ['vert', 124], ['VerticalLine', 124], ['rcub', 125], ['rbrace', 125],
]);
/** The longest name in HTML_NAMED_REFERENCES. */
const LONGEST_NAME = Math.max(...[...HTML_NAMED_REFERENCES.keys()].map((name) => name.length));
/** JSON's two-character escapes: the character after the backslash → the one it writes (-1: none). */
const SHORT_ESCAPES = new Int16Array(128).fill(-1);
for (const [after, writes] of [[0x22, 0x22], [0x5c, 0x5c], [0x2f, 0x2f], [0x62, 0x08], [0x66, 0x0c], [0x6e, 0x0a], [0x72, 0x0d], [0x74, 0x09]] as const) SHORT_ESCAPES[after] = writes;
/** The character JSON's escape `\` + `after` writes (`n` → a line feed, `/` → `/`), -1 when that is no escape. */
export function shortEscapeOf(after: number): number {
  return after < 128 ? SHORT_ESCAPES[after]! : -1;
}

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
    // An HTML escape whose & is JSON-escaped (Go's html/template output through encoding/json: `\u0026#43;`).
    if (unit === AMPERSAND) {
      const html = htmlEscapeAt(text, at + 5);
      if (html >= 0) {
        escapeLength += 5;
        return html;
      }
    }
    escapeLength = 6;
    return unit;
  }
  return htmlEscapeAt(text, at);
}

/** The character the HTML escape at `amp` writes, the character at `amp` taken for its `&`; -1 when none starts there. */
function htmlEscapeAt(text: string, amp: number): number {
  if (text.charCodeAt(amp + 1) !== 0x23 /* # */) return namedAt(text, amp);
  // &#NNN; or &#xHH; with any number of leading zeros, as secretForms matches them.
  const hex = text.charCodeAt(amp + 2) === 0x78 || text.charCodeAt(amp + 2) === 0x58;
  let i = amp + (hex ? 3 : 2);
  while (text.charCodeAt(i) === 0x30) i += 1;
  let end = i;
  while (end < text.length && end - i < 8 && (hex ? hexDigit(text.charCodeAt(end)) >= 0 : isDecimal(text.charCodeAt(end)))) end += 1;
  if (text.charCodeAt(end) !== 0x3b /* ; */ || (end === i && text.charCodeAt(i - 1) !== 0x30)) return -1;
  const value = end === i ? 0 : hex ? hexValue(text, i, end) : Number(text.slice(i, end));
  escapeLength = end + 1 - amp;
  return value;
}

/** A named reference of HTML_NAMED_REFERENCES at `amp` (`&sol;`, `&lt;`), its value; -1 when none starts there. */
function namedAt(text: string, amp: number): number {
  let end = amp + 1;
  while (end - amp - 1 <= LONGEST_NAME && isLetter(text.charCodeAt(end))) end += 1;
  if (end === amp + 1 || text.charCodeAt(end) !== 0x3b /* ; */) return -1;
  const value = HTML_NAMED_REFERENCES.get(text.slice(amp + 1, end));
  if (value === undefined) return -1;
  escapeLength = end + 1 - amp;
  return value;
}

function isLetter(c: number): boolean {
  return (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
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
