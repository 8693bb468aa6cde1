// Keyword lists: case-insensitive, width- and compatibility-insensitive (full-width `ＶＰＮ` is `VPN`,
// half-width `ｶﾞ` is `ガ`, mathematical `𝐛` is `b`), blind to invisible characters (`pass\u200Bword`
// is `password`) and decorative marks (`v̲p̲n̲` is `vpn`), and to how accents are written (`é` or
// `e` + U+0301; stacked marks in any order), compiled once into an
// Aho-Corasick automaton so the scan is one pass whatever the list's length. A keyword that starts
// (ends) with an ASCII letter or digit only matches where the text has no ASCII letter or digit
// just before (after) it, so "ass" does not hit "class"; CJK keywords match anywhere (the script has
// no word spaces). A match reports the span of the original characters, the invisible ones inside it
// included, so a mask covers them. How each code point folds (the table the scan reads, and
// `foldKeyword`) is proto/src/keyword-fold.ts, which the control plane's policy validation shares.
import {
  ATTACH,
  BLOCKS,
  COMBINING_DOT_ABOVE,
  CONT,
  EXPAND,
  EXPANSIONS,
  IGNORE,
  MAX_CLUSTER,
  SINGLE,
  SMALL_I,
  canonicalOrder,
  codePointAt,
  codePointEndingAt,
  entry,
  expansionCodePoints,
  foldKeyword,
  lastUnitOf,
} from '../../../../proto/src/keyword-fold.js';
import type { Detector, Match } from './detector.js';

interface TrieNode {
  next: Map<number, TrieNode>;
  fail: TrieNode | null;
  /** Lengths (in folded units) of the keywords ending here (own and via fail links), longest first. */
  out: number[];
  /** Folded units from the root. */
  depth: number;
}

function node(depth: number): TrieNode {
  return { next: new Map(), fail: null, out: [], depth };
}

/** Texts up to this long are remembered for `partial` (a stream's scan: the hold cap and context). */
const PARTIAL_TEXT_CHARS = 128 * 1024;

/** The last folded unit of the text before `from` (invisible characters skipped), -1 for none. */
function unitBefore(text: string, from: number): number {
  let sawDot = false;
  for (let i = from; i > 0; ) {
    const cp = codePointEndingAt(text, i);
    i -= cp > 0xffff ? 2 : 1;
    const e = entry(cp);
    const kind = e & 3;
    if (kind === IGNORE) continue;
    if (kind === ATTACH) {
      if (e >>> 3 === COMBINING_DOT_ABOVE) sawDot = true;
      continue;
    }
    const last = kind === EXPAND ? EXPANSIONS[(e >>> 3) + EXPANSIONS[e >>> 3]!]! : lastUnitOf(e >>> 3);
    return sawDot && last !== SMALL_I ? COMBINING_DOT_ABOVE : last;
  }
  return sawDot ? COMBINING_DOT_ABOVE : -1;
}

/** Whether a character other than a mark or an invisible one comes after `at` in `text`. */
function letterAfter(text: string, at: number): boolean {
  for (let i = text.length; i > at + 1; ) {
    const cp = codePointEndingAt(text, i);
    i -= cp > 0xffff ? 2 : 1;
    if (i <= at) return false;
    const e = entry(cp);
    const kind = e & 3;
    if (kind !== IGNORE && kind !== ATTACH && (e & CONT) === 0) return true;
  }
  return false;
}

function isAsciiWord(code: number): boolean {
  return (code >= 48 && code <= 57) || (code >= 65 && code <= 90) || (code >= 97 && code <= 122);
}

/** What `compileKeywords` returns: matches, plus the undecided match at the end of a text (for streams). */
export interface KeywordFinder {
  (text: string, from?: number): Match[];
  /**
   * Where a match may still begin that more text decides (a keyword begun at the end of `text`,
   * possibly with invisible characters after it; or a match whose next character has not come:
   * a combining mark or a letter would undo it), as a Match ending at the end of `text`; else null.
   */
  partial: (text: string, from: number) => Match | null;
}

/** Compiles `keywords` once; the returned function finds leftmost-longest, non-overlapping matches. */
export function compileKeywords(keywords: readonly string[]): KeywordFinder {
  const root = node(0);
  let count = 0;
  let longest = 0;
  for (const keyword of keywords) {
    const units = foldKeyword(keyword);
    if (units.length === 0) continue;
    let at = root;
    for (const c of units) {
      let child = at.next.get(c);
      if (child === undefined) {
        child = node(at.depth + 1);
        at.next.set(c, child);
      }
      at = child;
    }
    if (!at.out.includes(units.length)) at.out.push(units.length);
    longest = Math.max(longest, units.length);
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

  // The last folded units of the scan, in a ring: where each one's character starts and ends in the
  // text (its end moved past a dropped U+0307), the unit, and whether it is its character's first.
  let ringSize = 4;
  while (ringSize < longest + 2) ringSize *= 2;
  const mask = ringSize - 1;
  const ringStart = new Int32Array(ringSize);
  const ringEnd = new Int32Array(ringSize);
  const ringUnit = new Int32Array(ringSize);
  const ringFirst = new Uint8Array(ringSize);
  // Matches ending at the last character, until the next one says whether they stand.
  const pending: number[] = [];
  const scratch = [0, 0];
  // A letter and the marks after it when they are out of canonical order (`cluster`): its code
  // points put in order, then as units.
  const clusterCps = new Int32Array(MAX_CLUSTER * 2);
  const clusterUnits = new Int32Array(MAX_CLUSTER * 4);
  let clusterN = 0;
  /**
   * When marks follow the character at `i` (entry `e`, `size` units) and the fold of it and them is
   * out of canonical order: that fold in order in `clusterUnits` (`clusterN` units), and the end of
   * the last mark (decorative ones and invisible characters among them included); else -1.
   */
  const cluster = (text: string, i: number, e: number, size: number): number => {
    let n = 1;
    if ((e & 3) === EXPAND) n = expansionCodePoints(e >>> 3, clusterCps, 0);
    else clusterCps[0] = e >>> 3;
    let end = i + size;
    let marks = 0;
    for (let j = end; j < text.length; ) {
      const packed = codePointAt(text, j);
      j += packed & 3;
      const f = entry(Math.floor(packed / 4));
      const kind = f & 3;
      if (kind === IGNORE) continue;
      if (kind === ATTACH && (f >>> 3 !== COMBINING_DOT_ABOVE || clusterCps[n - 1] === SMALL_I)) {
        end = j;
        continue;
      }
      if ((f & CONT) === 0) break;
      if (n >= MAX_CLUSTER) return -1;
      if (kind === EXPAND) n = expansionCodePoints(f >>> 3, clusterCps, n);
      else clusterCps[n++] = f >>> 3;
      marks++;
      end = j;
    }
    if (marks === 0 || !canonicalOrder(clusterCps, 0, n)) return -1;
    let u = 0;
    for (let c = 0; c < n; c++) {
      const cp = clusterCps[c]!;
      if (cp > 0xffff) {
        clusterUnits[u++] = 0xd800 + ((cp - 0x10000) >> 10);
        clusterUnits[u++] = lastUnitOf(cp);
      } else clusterUnits[u++] = cp;
    }
    clusterN = u;
    return end;
  };
  // The last scan's undecided start (partial), for the stream guard's call right after find on the
  // same text.
  let lastText: string | null = null;
  let lastFrom = -1;
  let lastPartial = -1;
  // The text is let go once the synchronous turn that scanned it ends (the stream guard asks for
  // `partial` in the same turn): the detector lives in the compiled-policy cache, so holding the
  // last prompt or answer it scanned would keep callers' text in memory for the process's life.
  let forgetQueued = false;
  const forget = (): void => {
    forgetQueued = false;
    lastText = null;
  };

  const find = (text: string, from = 0): Match[] => {
    // Kept for a stream's scan (its held text is at most the hold cap and its context), not a whole body.
    lastText = text.length <= PARTIAL_TEXT_CHARS ? text : null;
    if (lastText !== null && !forgetQueued) {
      forgetQueued = true;
      queueMicrotask(forget);
    }
    lastFrom = from;
    lastPartial = -1;
    if (count === 0) return [];
    const found: Match[] = [];
    let at = root;
    const before = unitBefore(text, from);
    let lastUnit = before;
    let k = -1;
    let pendingCount = 0;
    let pendingWordEnd = false;
    // Where a possible match began that marks on its last letter undid, and where they were: a mark
    // still to come may put them in another order (a stream's next delta), so while no other
    // character follows them it is held as `partial`.
    let markHold = -1;
    let markHoldAt = -1;
    for (let i = from; i < text.length; ) {
      let cp = text.charCodeAt(i);
      let size = 1;
      if (cp >= 0xd800 && cp <= 0xdbff && i + 1 < text.length) {
        const low = text.charCodeAt(i + 1);
        if (low >= 0xdc00 && low <= 0xdfff) {
          cp = ((cp - 0xd800) << 10) + (low - 0xdc00) + 0x10000;
          size = 2;
        }
      }
      const block = BLOCKS[cp >>> 8];
      const e = block !== undefined ? block[cp & 0xff]! : entry(cp);
      const kind = e & 3;
      if (kind === SINGLE && at === root && pendingCount === 0) {
        // The common case: one unit that starts no keyword, nothing waiting on it.
        const u = e >>> 3;
        if (u <= 0xffff && starts[u] === 0) {
          ringUnit[++k & mask] = u;
          lastUnit = u;
          i += size;
          continue;
        }
      }
      if (kind === IGNORE) {
        i += size;
        continue;
      }
      if (kind === ATTACH && (e >>> 3 !== COMBINING_DOT_ABOVE || lastUnit === SMALL_I)) {
        // `i` + U+0307 is `i` (as `İ` is), and a decorative mark is read through: it joins the
        // character before it.
        if (k >= 0) ringEnd[k & mask] = i + size;
        i += size;
        continue;
      }
      let units: ArrayLike<number>;
      let offset: number;
      let n: number;
      const clusterEnd = (e & CONT) === 0 ? cluster(text, i, e, size) : -1;
      if ((e & CONT) !== 0 && at !== root) {
        markHold = ringStart[(k - at.depth + 1) & mask]!;
        markHoldAt = i;
      }
      if (clusterEnd >= 0) {
        // Fed as one character: a match neither ends nor starts inside it.
        markHold = at !== root ? ringStart[(k - at.depth + 1) & mask]! : i;
        markHoldAt = clusterEnd - 1;
        units = clusterUnits;
        offset = 0;
        n = clusterN;
        size = clusterEnd - i;
      } else if (kind === EXPAND) {
        units = EXPANSIONS;
        offset = (e >>> 3) + 1;
        n = EXPANSIONS[e >>> 3]!;
      } else {
        const folded = e >>> 3;
        units = scratch;
        offset = 0;
        if (folded > 0xffff) {
          scratch[0] = 0xd800 + ((folded - 0x10000) >> 10);
          scratch[1] = 0xdc00 + ((folded - 0x10000) & 0x3ff);
          n = 2;
        } else {
          scratch[0] = folded;
          n = 1;
        }
      }
      if (pendingCount > 0) {
        // A mark after a match makes its last letter another one; a word character glues it to a word.
        const next = units[offset]!;
        if ((e & CONT) === 0 && !(pendingWordEnd && isAsciiWord(next))) {
          // They end with the last unit's character (a U+0307 dropped after its `i` included).
          const end = ringEnd[k & mask]!;
          for (let p = 0; p < pendingCount; p++) found.push({ start: pending[p]!, end });
        }
        pendingCount = 0;
      }
      for (let j = 0; j < n; j++) {
        const u = units[offset + j]!;
        k++;
        const slot = k & mask;
        ringUnit[slot] = u;
        lastUnit = u;
        // A unit skipped at the root is in no match: only the unit itself is read (the one before a match).
        if (at === root && starts[u] === 0) continue;
        ringStart[slot] = i;
        ringEnd[slot] = i + size;
        ringFirst[slot] = j === 0 ? 1 : 0;
        while (at !== root && !at.next.has(u)) at = at.fail!;
        at = at.next.get(u) ?? root;
        // A match ends with a whole character, never inside the fold of one (`ﬁ` is `fi`, not `f`).
        if (j !== n - 1 || at.out.length === 0) continue;
        for (const len of at.out) {
          const first = k - len + 1;
          // ...and starts with one.
          if (ringFirst[first & mask] === 0) continue;
          if (isAsciiWord(ringUnit[first & mask]!)) {
            const prev = first > 0 ? ringUnit[(first - 1) & mask]! : before;
            if (isAsciiWord(prev)) continue;
          }
          pending[pendingCount++] = ringStart[first & mask]!;
        }
        pendingWordEnd = isAsciiWord(u);
      }
      i += size;
    }
    if (pendingCount > 0) {
      const end = ringEnd[k & mask]!;
      for (let p = 0; p < pendingCount; p++) {
        found.push({ start: pending[p]!, end });
        if (lastPartial < 0 || pending[p]! < lastPartial) lastPartial = pending[p]!;
      }
    }
    if (at !== root) {
      const start = ringStart[(k - at.depth + 1) & mask]!;
      if (lastPartial < 0 || start < lastPartial) lastPartial = start;
    }
    if (markHold >= 0 && (lastPartial < 0 || markHold < lastPartial) && !letterAfter(text, markHoldAt)) lastPartial = markHold;
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
  const partial = (text: string, from: number): Match | null => {
    if (text !== lastText || from !== lastFrom) find(text, from);
    return lastPartial < 0 ? null : { start: lastPartial, end: text.length };
  };
  return Object.assign(find, { partial });
}

/**
 * A keywords detector for one rule's list. Its window: the longest keyword (as written or folded)
 * and its right neighbour; a keyword still open at the end of a stream's text (with invisible
 * characters inside it, or in a longer writing such as `ｶﾞ` or `𝐛`), or a match whose next character
 * has not come, is held by `partial`.
 */
export function keywordsDetector(keywords: readonly string[]): Detector {
  const find = compileKeywords(keywords);
  const longest = keywords.reduce((n, k) => Math.max(n, k.length, foldKeyword(k).length), 0);
  return { name: 'keywords', placeholder: '[REDACTED]', window: longest + 1, find, partial: find.partial };
}
