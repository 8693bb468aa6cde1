// Keyword lists: case-insensitive and width-insensitive (full-width `ＶＰＮ` is `VPN`), compiled once
// into an Aho-Corasick automaton so the scan is one pass whatever the list's length. A keyword that
// starts (ends) with an ASCII letter or digit only matches where the text has no ASCII letter or
// digit just before (after) it, so "ass" does not hit "class"; CJK keywords match anywhere (the
// script has no word spaces).
import type { Detector, Match } from './detector.js';
import { foldWidthUnit } from './fold-width.js';

interface TrieNode {
  next: Map<number, TrieNode>;
  fail: TrieNode | null;
  /** Lengths of the keywords ending here (own and via fail links), longest first. */
  out: number[];
}

function node(): TrieNode {
  return { next: new Map(), fail: null, out: [] };
}

// The case fold of every UTF-16 unit, full-width forms as ASCII (U+FF01-FF5E, and U+3000 as a
// space), built on first use. A unit folds to one unit only, so positions in the folded text are
// positions in the text. Lower case alone is not a fold: Greek final sigma `ς` stays apart from the
// `σ` that `Σ` lowers to (a keyword `ΚΩΔΙΚΟΣ` missed `κωδικος`), and `İ` lowers to two units; so
// the lower case of the upper case is taken where each is one unit, and `İ` folds to `i`.
let foldTable: Uint16Array | undefined;

const DOTTED_CAPITAL_I = 0x130;
// Turkish dotless ı: its upper case is I, but Unicode's case folding keeps it apart from i (as the
// regex rules' `/iu` do): folded to i, the keyword `sik` would block the common word `sık`.
const DOTLESS_SMALL_I = 0x131;

function foldUnit(unit: number): number {
  if (unit === DOTTED_CAPITAL_I) return 0x69;
  if (unit === DOTLESS_SMALL_I) return unit;
  const lower = String.fromCharCode(unit).toLowerCase();
  if (lower.length !== 1) return unit;
  const upper = lower.toUpperCase();
  if (upper.length !== 1) return lower.charCodeAt(0);
  const folded = upper.toLowerCase();
  return folded.length === 1 ? folded.charCodeAt(0) : lower.charCodeAt(0);
}

function buildFoldTable(): Uint16Array {
  const table = new Uint16Array(65536);
  for (let code = 0; code < 65536; code++) table[code] = foldUnit(foldWidthUnit(code));
  return table;
}

function fold(code: number): number {
  foldTable ??= buildFoldTable();
  return foldTable[code]!;
}

function isAsciiWord(code: number): boolean {
  return (code >= 48 && code <= 57) || (code >= 65 && code <= 90) || (code >= 97 && code <= 122);
}

/** Compiles `keywords` once; the returned function finds leftmost-longest, non-overlapping matches. */
export function compileKeywords(keywords: readonly string[]): (text: string, from?: number) => Match[] {
  const root = node();
  let count = 0;
  for (const keyword of keywords) {
    if (keyword.length === 0) continue;
    let at = root;
    for (let i = 0; i < keyword.length; i++) {
      const c = fold(keyword.charCodeAt(i));
      let child = at.next.get(c);
      if (child === undefined) {
        child = node();
        at.next.set(c, child);
      }
      at = child;
    }
    if (!at.out.includes(keyword.length)) at.out.push(keyword.length);
    count++;
  }
  // Breadth-first failure links.
  const queue: TrieNode[] = [];
  for (const child of root.next.values()) {
    child.fail = root;
    queue.push(child);
  }
  for (let q = 0; q < queue.length; q++) {
    const at = queue[q]!;
    for (const [c, child] of at.next) {
      let f = at.fail;
      while (f !== null && !f.next.has(c)) f = f.fail;
      child.fail = f === null ? root : f.next.get(c)!;
      child.out = [...child.out, ...child.fail.out];
      queue.push(child);
    }
  }
  for (const n of queue) n.out.sort((a, b) => b - a);
  // Units that start some keyword: at the root, any other unit is skipped with one array read.
  const starts = new Uint8Array(65536);
  for (const c of root.next.keys()) starts[c] = 1;

  return (text: string, from = 0): Match[] => {
    if (count === 0) return [];
    const found: Match[] = [];
    let at = root;
    for (let i = from; i < text.length; i++) {
      const c = fold(text.charCodeAt(i));
      if (at === root && starts[c] === 0) continue;
      while (at !== root && !at.next.has(c)) at = at.fail!;
      at = at.next.get(c) ?? root;
      for (const len of at.out) {
        const start = i + 1 - len;
        const end = i + 1;
        // Words are told on folded units: `ＶＰＮ` is a word, and `ｘＶＰＮ` glues it to another.
        const wordStart = isAsciiWord(fold(text.charCodeAt(start)));
        const wordEnd = isAsciiWord(fold(text.charCodeAt(end - 1)));
        if (wordStart && start > 0 && isAsciiWord(fold(text.charCodeAt(start - 1)))) continue;
        if (wordEnd && end < text.length && isAsciiWord(fold(text.charCodeAt(end)))) continue;
        found.push({ start, end });
      }
    }
    // Leftmost, then longest, without overlaps.
    found.sort((a, b) => a.start - b.start || b.end - a.end);
    const out: Match[] = [];
    let lastEnd = -1;
    for (const m of found) {
      if (m.start < lastEnd) continue;
      out.push(m);
      lastEnd = m.end;
    }
    return out;
  };
}

/** A keywords detector for one rule's list (its window: the longest keyword and its right neighbour). */
export function keywordsDetector(keywords: readonly string[]): Detector {
  const find = compileKeywords(keywords);
  const longest = keywords.reduce((n, k) => Math.max(n, k.length), 0);
  return { name: 'keywords', placeholder: '[REDACTED]', window: longest + 1, find };
}
