/**
 * The one fold of keyword guardrails, shared by the node's keyword matcher
 * (edge-node/src/guardrails/detectors/keywords.ts, which scans text with this table) and the control
 * plane's guardrail policy validation (control-plane/src/policies/guardrail-policy-validation.ts,
 * which refuses a keyword that folds to nothing: the node could never match it). One function on
 * both sides, so they cannot disagree on what a keyword is made of.
 */
// The fold of every code point, read from a table (blocks of 256 code points), each entry an int32:
//   bits 0-1: SINGLE (bits 3+: one code point), EXPAND (bits 3+: offset in EXPANSIONS of
//             [length, UTF-16 units…]), IGNORE (folds to nothing), ATTACH (bits 3+: the code point;
//             U+0307, see below, or a decorative mark: no unit of its own, it joins the span of the
//             character before it);
//   bit 2 (CONT): the fold starts with a combining mark or a Hangul vowel or final consonant, which
//             belongs to the character before it (a match never ends just before one: `e` is not
//             `é`, `カ` is not `ガ`, `하` is not `한`, whichever way each is written).
// A code point folds to: its compatibility decomposition (NFKD: full-width and half-width forms,
// mathematical alphanumerics, ligatures, and precomposed accents as base + combining mark, so that
// precomposed and decomposed text fold alike), each character of it case-folded, repeated until
// stable, with default-ignorable code points (zero width space and joiners, word joiner, BOM, soft
// hyphen, variation selectors, tags, bidi controls, Hangul fillers) dropped. A whole default-
// ignorable code point folds to nothing.
//
// Decorative marks (`isDecorative`: enclosing marks, the line and overlay marks U+0305, U+0332–U+0337
// and U+033F, the marks for symbols U+20D0–U+20FF, the half marks U+FE20–U+FE2F) make no letter in
// any writing, so they are read through as invisible characters are, in the list and the text
// alike: `v̲p̲n̲` and `v̶p̶n̶` are `vpn`. Unlike an invisible character a decorative mark belongs to the
// letter before it, so a match's span takes in those after its last letter (the mask covers them).
// U+0338 is not one: `≠` is `=` + U+0338. Other marks stay significant (an accent belongs to its
// letter), in canonical order: two or more marks on one letter are compared sorted by their
// canonical combining class (`markRank`), as NFD orders them, so `a` + U+0301 + U+0323 is `ạ́`.
//
// Case folding: lower case alone is not a fold: Greek final sigma `ς` stays apart from the `σ` that
// `Σ` lowers to (a keyword `ΚΩΔΙΚΟΣ` missed `κωδικος`), and `İ` lowers to two code points; so the
// lower case of the upper case is taken where each is one code point, and `İ` folds to `i` (with
// U+0307 right after an `i` dropped, so the decomposed `I` + U+0307 is `i` too). A letter whose fold
// is two (`ß`) stays itself.
export const SINGLE = 0;
export const EXPAND = 1;
export const IGNORE = 2;
export const ATTACH = 3;
export const CONT = 4;

const DOTTED_CAPITAL_I = 0x130;
export const COMBINING_DOT_ABOVE = 0x307;
// Turkish dotless ı: its upper case is I, but Unicode's case folding keeps it apart from i (as the
// regex rules' `/iu` do): folded to i, the keyword `sik` would block the common word `sık`.
const DOTLESS_SMALL_I = 0x131;
export const SMALL_I = 0x69;

const IGNORABLE_RE = /^\p{Default_Ignorable_Code_Point}$/u;
const MARK_RE = /^\p{M}$/u;
const ENCLOSING_MARK_RE = /^\p{Me}$/u;

// One mark of each canonical combining class, in ascending order of class (1, 6, 7, …, 240): NFD
// puts a mark before another of a higher class, which tells where a mark's class falls among them.
const CLASS_MARKS = [
  0x334, 0x16ff0, 0x93c, 0x3099, 0x94d, 0x5b0, 0x5b1, 0x5b2, 0x5b3, 0x5b4, 0x5b5, 0x5b6, 0x5b7, 0x5b8, 0x5b9, 0x5bb,
  0x5bc, 0x5bd, 0x5bf, 0x5c1, 0x5c2, 0xfb1e, 0x64b, 0x64c, 0x64d, 0x618, 0x619, 0x61a, 0x651, 0x652, 0x670, 0x711,
  0xc55, 0xc56, 0xe38, 0xe48, 0xeb8, 0xec8, 0xf71, 0xf72, 0xf74, 0x321, 0x1dce, 0x31b, 0x1dfa, 0x316, 0x59a, 0x302e,
  0x1d16d, 0x5ae, 0x300, 0x315, 0x35c, 0x35d, 0x345,
].map((cp) => String.fromCodePoint(cp));
/** Most marks one letter's run is put in canonical order with; a longer run is compared as written. */
export const MAX_CLUSTER = 32;

export const EXPANSIONS: number[] = [];

// Built a block at a time, as texts first hold one: a text touches few of them, so a node builds
// what its traffic reads (a few milliseconds at most) rather than all of Unicode up front.
export const BLOCKS: Array<Int32Array | undefined> = new Array<Int32Array | undefined>(0x1100);
/** Each code point's `markRank`, built with its block of BLOCKS. */
const RANKS: Array<Uint8Array | undefined> = new Array<Uint8Array | undefined>(0x1100);
const NO_RANKS = new Uint8Array(256);

/** The code point `s` is made of, or -1 when it is not exactly one. */
function oneCodePoint(s: string): number {
  const cp = s.codePointAt(0);
  return cp !== undefined && s.length === (cp > 0xffff ? 2 : 1) ? cp : -1;
}

function caseFold(cp: number): number {
  if (cp === DOTTED_CAPITAL_I) return SMALL_I;
  if (cp === DOTLESS_SMALL_I) return cp;
  const lower = oneCodePoint(String.fromCodePoint(cp).toLowerCase());
  if (lower < 0) return cp;
  const upper = oneCodePoint(String.fromCodePoint(lower).toUpperCase());
  if (upper < 0) return lower;
  const folded = oneCodePoint(String.fromCodePoint(upper).toLowerCase());
  return folded < 0 ? lower : folded;
}

function isIgnorable(cp: number): boolean {
  return IGNORABLE_RE.test(String.fromCodePoint(cp));
}

/** A mark that makes no letter (see above): read through, joining the character before it. */
function isDecorative(cp: number): boolean {
  if (cp === 0x305 || (cp >= 0x332 && cp <= 0x337) || cp === 0x33f) return true;
  const s = String.fromCodePoint(cp);
  if ((cp >= 0x20d0 && cp <= 0x20ff) || (cp >= 0xfe20 && cp <= 0xfe2f)) return MARK_RE.test(s);
  return ENCLOSING_MARK_RE.test(s);
}

/**
 * A mark's canonical combining class as a rank (0 for a class of 0, else 1 + the number of classes
 * below it): the order NFD gives marks on one letter. Asked of Unicode once per code point, as its
 * block is built.
 */
function markRank(cp: number): number {
  const m = String.fromCodePoint(cp);
  // Whether NFD puts `b` before `a` (so 0 < class(b) < class(a)).
  const swapped = (a: string, b: string): boolean => `a${a}${b}`.normalize('NFD') === `a${b}${a}`;
  let lo = 0;
  let hi = CLASS_MARKS.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (swapped(m, CLASS_MARKS[mid]!)) lo = mid + 1;
    else hi = mid;
  }
  if (lo > 0) return lo + 1;
  return swapped(CLASS_MARKS[1]!, m) ? 1 : 0;
}

/** Whether `cp` belongs to the character before it: a combining mark, a Hangul vowel or final. */
function continues(cp: number): boolean {
  return cp >= 0x300 && ((cp >= 0x1160 && cp <= 0x11ff) || (cp >= 0xd7b0 && cp <= 0xd7ff) || MARK_RE.test(String.fromCodePoint(cp)));
}

function foldCodePoint(cp: number): number[] {
  // One code point to one (an accent-free compatibility form, a capital letter): folded once.
  const decomposed = oneCodePoint(String.fromCodePoint(cp).normalize('NFKD'));
  if (decomposed >= 0) {
    const folded = caseFold(decomposed);
    if (folded === decomposed || oneCodePoint(String.fromCodePoint(folded).normalize('NFKD')) === folded) {
      return isIgnorable(folded) ? [] : [folded];
    }
  }
  let cps = [cp];
  for (let round = 0; round < 4; round++) {
    const next: number[] = [];
    for (const c of cps) {
      if (c === DOTTED_CAPITAL_I) {
        next.push(SMALL_I);
        continue;
      }
      for (const d of String.fromCodePoint(c).normalize('NFKD')) next.push(caseFold(d.codePointAt(0)!));
    }
    const same = next.length === cps.length && next.every((c, i) => c === cps[i]);
    cps = next;
    if (same) break;
  }
  return cps.filter((c) => !isIgnorable(c) && !isDecorative(c));
}

function entryOf(cp: number): number {
  if (cp < 0x80) return (cp >= 0x41 && cp <= 0x5a ? cp + 0x20 : cp) << 3;
  if (cp === COMBINING_DOT_ABOVE) return (cp << 3) | ATTACH | CONT;
  if (cp >= 0xd800 && cp <= 0xdfff) return cp << 3; // a lone surrogate stays itself
  const s = String.fromCodePoint(cp);
  if (IGNORABLE_RE.test(s)) return IGNORE;
  if (isDecorative(cp)) return (cp << 3) | ATTACH;
  // Most code points fold to themselves: no decomposition, no case.
  if (s.normalize('NFKD') === s && s.toLowerCase() === s && s.toUpperCase() === s) return (cp << 3) | (continues(cp) ? CONT : 0);
  const cps = foldCodePoint(cp);
  if (cps.length === 0) return IGNORE;
  const flags = continues(cps[0]!) ? CONT : 0;
  if (cps.length === 1) return (cps[0]! << 3) | SINGLE | flags;
  const units: number[] = [];
  for (const c of cps) {
    if (c > 0xffff) units.push(0xd800 + ((c - 0x10000) >> 10), 0xdc00 + ((c - 0x10000) & 0x3ff));
    else units.push(c);
  }
  const offset = EXPANSIONS.length;
  EXPANSIONS.push(units.length, ...units);
  return (offset << 3) | EXPAND | flags;
}

/** The entry of `cp`, its block of 256 code points built on first use. */
export function entry(cp: number): number {
  const key = cp >>> 8;
  let block = BLOCKS[key];
  if (block === undefined) {
    block = new Int32Array(256);
    // Planes 4–13 (unassigned) and 15–16 (private use) fold to themselves: filled without asking
    // Unicode, so a text touching every block costs a few hundred ms once, not a second or more.
    const plane = key >>> 8;
    const plain = (plane >= 4 && plane <= 13) || plane >= 15;
    let ranks = NO_RANKS;
    for (let i = 0; i < 256; i++) {
      const c = (key << 8) | i;
      block[i] = plain ? c << 3 : entryOf(c);
      if (!plain && (block[i]! & CONT) !== 0) {
        if (ranks === NO_RANKS) ranks = new Uint8Array(256);
        ranks[i] = markRank(c);
      }
    }
    RANKS[key] = ranks;
    BLOCKS[key] = block;
  }
  return block[cp & 0xff]!;
}

/** The `markRank` of a code point (0 for all but marks). */
function rankOf(cp: number): number {
  if (cp < 0x300) return 0;
  entry(cp);
  return RANKS[cp >>> 8]![cp & 0xff]!;
}

/**
 * Puts each run of marks of a non-zero class in `cps[from..n)` in canonical order (a stable sort by
 * rank, as NFD does); returns whether anything moved.
 */
export function canonicalOrder(cps: Int32Array | number[], from: number, n: number): boolean {
  let moved = false;
  for (let i = from + 1; i < n; i++) {
    const c = cps[i]!;
    const r = rankOf(c);
    if (r === 0) continue;
    let j = i;
    while (j > from) {
      if (rankOf(cps[j - 1]!) <= r) break; // a letter (rank 0) ends the run
      cps[j] = cps[j - 1]!;
      j--;
    }
    if (j !== i) {
      cps[j] = c;
      moved = true;
    }
  }
  return moved;
}

/** The code point at `i` (a surrogate pair read whole) and its length in units, packed as cp * 4 + size. */
export function codePointAt(text: string, i: number): number {
  const code = text.charCodeAt(i);
  if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
    const low = text.charCodeAt(i + 1);
    if (low >= 0xdc00 && low <= 0xdfff) return (((code - 0xd800) << 10) + (low - 0xdc00) + 0x10000) * 4 + 2;
  }
  return code * 4 + 1;
}

/** The code point whose last UTF-16 unit is at `end - 1` (a lone surrogate as itself). */
export function codePointEndingAt(text: string, end: number): number {
  const low = text.charCodeAt(end - 1);
  if (low >= 0xdc00 && low <= 0xdfff && end >= 2) {
    const high = text.charCodeAt(end - 2);
    if (high >= 0xd800 && high <= 0xdbff) return ((high - 0xd800) << 10) + (low - 0xdc00) + 0x10000;
  }
  return low;
}

export function lastUnitOf(cp: number): number {
  return cp > 0xffff ? 0xdc00 + ((cp - 0x10000) & 0x3ff) : cp;
}

/** Appends the code points of EXPANSIONS' entry at `at` (UTF-16 units) to `cps` from `n`; returns the new length. */
export function expansionCodePoints(at: number, cps: Int32Array | number[], n: number): number {
  const end = at + EXPANSIONS[at]!;
  for (let j = at + 1; j <= end; j++) {
    const u = EXPANSIONS[j]!;
    if (u >= 0xd800 && u <= 0xdbff && j < end) {
      cps[n++] = ((u - 0xd800) << 10) + (EXPANSIONS[++j]! - 0xdc00) + 0x10000;
    } else cps[n++] = u;
  }
  return n;
}

/**
 * `keyword` folded as the text is (its marks in canonical order), as UTF-16 units: empty for a
 * keyword made only of invisible characters and decorative marks, which no text can match.
 */
export function foldKeyword(keyword: string): number[] {
  const cps: number[] = [];
  for (let i = 0; i < keyword.length; ) {
    const packed = codePointAt(keyword, i);
    i += packed & 3;
    const e = entry(Math.floor(packed / 4));
    const kind = e & 3;
    if (kind === IGNORE) continue;
    if (kind === ATTACH && (e >>> 3 !== COMBINING_DOT_ABOVE || cps.at(-1) === SMALL_I)) continue;
    if (kind === EXPAND) expansionCodePoints(e >>> 3, cps, cps.length);
    else cps.push(e >>> 3);
  }
  canonicalOrder(cps, 0, cps.length);
  const units: number[] = [];
  for (const cp of cps) {
    if (cp > 0xffff) units.push(0xd800 + ((cp - 0x10000) >> 10), lastUnitOf(cp));
    else units.push(cp);
  }
  return units;
}
