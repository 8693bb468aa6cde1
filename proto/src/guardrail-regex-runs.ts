/**
 * The polynomial backtracking shape: repetitions in a row that can match the same characters
 * (`a*a*b`, `\s*\s*x`, `\w+\s*\w+x`, `.*x.*y`, `a*a{0,31}b`), with something after them that can
 * fail. A run of those characters can then be split between them in many ways, and every way is
 * tried at every start: on a failing run of n characters, time of order n³ for two unbounded ones
 * (`a*a*b`: half a second on 1 100 characters with the `u` flag the node uses), n⁴ for three
 * (`a*a*a*b`: 48 s on 1 024). The node scans long texts in windows of 1 024 characters, which
 * bounds a single unbounded repetition (`.*x`, quadratic) to about a millisecond per window, but
 * not these. V8's linear-time fallback engine does not take the `u` or `i` flags, so such patterns
 * are refused, like the exponential shapes in guardrail-regex-risk.ts.
 *
 * The check walks each sequence of the pattern carrying "runs": a repetition whose count varies,
 * the mandatory items after it (the same text must match them too), and the ways to split a text
 * among the repetitions of the run so far: an unbounded one counts as a window (1 024 ways), `x?`
 * as 2, `x{0,31}` as 32. A later repetition whose characters meet a run multiplies its ways;
 * past MAX_WAYS (four times one unbounded item's), with anything after it that can
 * fail (a mandatory item, an anchor, `\b`, a lookaround), the pattern is refused. So one unbounded
 * item and a few small counts pass (`a*a{0,3}b`), two unbounded do not. Character sets are compared
 * exactly, by the engine under the pattern's flags (`(?i)` folding included): a literal is tested
 * against the other sets; two classes by searching a string of every code point for a character
 * both match. A repeated group meets a run when one of its alternatives has every mandatory
 * character in it (`\d+(?:,\d{3})*` does not: the comma); a back-reference counts as unbounded
 * over the characters of the capturing groups; a lookaround's body goes on from the runs before it
 * (a lookbehind's from right to left), a negative one's counted in full. A run in a top-level
 * alternative that starts with `^`, or right after a mandatory character outside its set, gets a
 * window's length more (ANCHORED_WAYS). `\w+@\w+`, `\d+\.\d+`, `\w+\s+\w+`,
 * `password\s*[:=]\s*\S+` and `foo.*bar` pass; a trailing pair that cannot fail (`.*foo.*`)
 * passes too: its first try succeeds.
 *
 * Both checks count their work in steps (a character read, a pair of sets compared, a run carried
 * past an item, a class pair scanned) and refuse a pattern past MAX_CHECK_STEPS: they run
 * synchronously on the control plane and again on every node, and a count, unlike a clock, gives
 * the same verdict on every machine and in every process.
 */

import { readEscape } from './guardrail-regex-escape.js';

/** A regex source matching exactly one character of an item; ANY when it is not known. */
type CharSet = string;
const ANY: CharSet = '[\\s\\S]';

type Item =
  | { kind: 'char'; set: CharSet; literal: string | undefined; min: number; max: number }
  | { kind: 'group'; alternatives: Item[][]; lookaround: boolean; behind: boolean; negative: boolean; capturing: boolean; min: number; max: number }
  | { kind: 'backreference' }
  | { kind: 'assertion'; caret: boolean };

interface Middle {
  set: CharSet;
  literal: string | undefined;
}

/**
 * A repetition and what follows it: a text that repeats one character of each mandatory item in
 * turn can be split between it and a later repetition in as many ways as it repeats, if every one
 * of those characters is also in both repetitions' sets.
 */
interface Run {
  set: CharSet;
  literal: string | undefined;
  /** Distinct by set, at most MAX_MIDDLES (past that, later ones are not required: more refusals, never fewer). */
  middles: Middle[];
  /** Ways to split a text among the run's repetitions so far, capped at budget + 1. */
  ways: number;
  /** The most ways it may reach: MAX_WAYS, or a window's length times that for an anchored run. */
  budget: number;
  /** Its budget, set and middles' sets: runs with the same key are merged. */
  key: string;
}

/** An unbounded repetition's ways: as many as a window's characters. */
const UNBOUNDED_WAYS = 1024;
/**
 * Per start, at most four times the ways of one unbounded repetition (`.*x`, which windows bound
 * to about a millisecond): `a*a{0,3}b` passes (≈ 4 ms per window at worst), `a*a{0,7}b` (24 ms)
 * and `a*a{0,31}b` (54 ms) do not.
 */
const MAX_WAYS = 4 * UNBOUNDED_WAYS;
/**
 * A run that starts right after a mandatory character outside its set (`password\s*:?\s*\S+`:
 * the `d`), or in a top-level alternative that starts with `^`, covers a stretch of text no other start's run shares: all
 * starts together split at most the window once, so its budget is a window's length larger (two
 * unbounded repetitions, not three).
 */
const ANCHORED_WAYS = MAX_WAYS * UNBOUNDED_WAYS;
/** Past these, the check gives up and refuses the pattern (a scan takes 5–80 ms). */
const MAX_RUNS = 64;
const MAX_MIDDLES = 64;
const MAX_SCANS = 16;
const MAX_UNION_SETS = 16;
const MAX_DEPTH = 64;

export const TOO_MANY_CLASS_RUNS =
  `it compares more than ${MAX_SCANS} pairs of repeated character classes, more than the check for slow shapes takes on: split it into several rules`;
export const TOO_DEEP = `it nests groups more than ${MAX_DEPTH} deep`;

/**
 * The most steps both checks together may take on one pattern. A step costs well under a
 * microsecond, except a class-pair scan (SCAN_STEPS). The longest patterns the test suites accept
 * take a few thousand; a pattern of 4 096 characters built to be slow (2 000 optional distinct
 * letters: every one compared with every run) takes over 100 000 and is refused in about a
 * millisecond, where checking it in full took 30–100 ms.
 */
export const MAX_CHECK_STEPS = 40_000;
/** A scan of every code point for a character two classes share (5–100 ms), in steps. */
const SCAN_STEPS = 1_000;
export const TOO_COSTLY =
  `it takes more than ${MAX_CHECK_STEPS} steps to check for slow shapes (the check runs on the control plane and on every node, so its work is capped): split it into several shorter rules`;

/** Steps spent so far on one pattern, by both checks. */
export interface CheckWork {
  steps: number;
}

/** Thrown when a pattern's check passes MAX_CHECK_STEPS. */
export class OverBudget extends Error {}

export function spend(work: CheckWork, steps: number): void {
  work.steps += steps;
  if (work.steps > MAX_CHECK_STEPS) throw new OverBudget();
}
export const POLYNOMIAL_RISK =
  'it has repetitions in a row that can match the same characters (such as a*a*b, \\s*\\s*x, \\w+\\s*\\w+x, .*x.*y or a*a{0,31}b), which split a text between them in so many ways that it can take polynomial time: seconds on a few thousand characters';

/** `{n}`, `{n,}` or `{n,m}` at lastIndex (digits of any length: `{0000…1,}` is `+`). */
const COUNTED = /\{(\d+)(,(\d*))?\}/y;

class Parser {
  i = 0;
  depth = 0;
  /** `\k<name>` is a back-reference under `u` or when the pattern names a group; otherwise the text `k<`. */
  readonly namedReferences: boolean;
  constructor(readonly source: string, readonly unicode: boolean, readonly work: CheckWork) {
    this.namedReferences = unicode || namesGroups(source);
  }

  alternatives(): Item[][] {
    const out: Item[][] = [this.sequence()];
    while (this.source[this.i] === '|') {
      this.i++;
      out.push(this.sequence());
    }
    return out;
  }

  private sequence(): Item[] {
    const items: Item[] = [];
    while (this.i < this.source.length && this.source[this.i] !== '|' && this.source[this.i] !== ')') items.push(this.item());
    return items;
  }

  private item(): Item {
    spend(this.work, 1);
    const s = this.source;
    const c = s[this.i]!;
    if (c === '(') return this.group();
    if (c === '^' || c === '$') {
      this.i++;
      this.quantifier();
      return { kind: 'assertion', caret: c === '^' };
    }
    if (c === '\\') {
      const read = readEscape(s, this.i, this.unicode, this.namedReferences);
      if (read.kind !== 'char') {
        this.i = read.end;
        this.quantifier();
        return read.kind === 'assertion' ? { kind: 'assertion', caret: false } : { kind: 'backreference' };
      }
    }
    const start = this.i;
    const literal = this.character();
    const set = s.slice(start, this.i);
    return { kind: 'char', set, literal, ...this.quantifier() };
  }

  /** One character's worth of pattern at `i` (a literal, escape, class or `.`); its literal value when it has one. */
  private character(): string | undefined {
    const s = this.source;
    const c = s[this.i]!;
    if (c === '[') {
      // In JavaScript `[]` is an empty class and `[^]` any character: a `]` first closes it.
      this.i++;
      if (s[this.i] === '^') this.i++;
      while (this.i < s.length && s[this.i] !== ']') this.i += s[this.i] === '\\' ? 2 : 1;
      this.i++;
      return undefined;
    }
    if (c === '.') {
      this.i++;
      return undefined;
    }
    if (c === '\\') {
      const read = readEscape(s, this.i, this.unicode, this.namedReferences);
      this.i = read.end;
      return read.literal;
    }
    const ch = String.fromCodePoint(s.codePointAt(this.i)!);
    this.i += ch.length;
    return ch;
  }

  private group(): Item {
    const s = this.source;
    this.i++;
    let lookaround = false;
    let behind = false;
    let negative = false;
    let capturing = true;
    if (s[this.i] === '?') {
      const kind = s.slice(this.i, this.i + 3);
      capturing = false;
      if (kind.startsWith('?:')) this.i += 2;
      else if (kind.startsWith('?=') || kind.startsWith('?!')) {
        lookaround = true;
        negative = kind[1] === '!';
        this.i += 2;
      } else if (kind === '?<=' || kind === '?<!') {
        lookaround = true;
        behind = true;
        negative = kind[2] === '!';
        this.i += 3;
      } else if (kind.startsWith('?<')) {
        capturing = true;
        this.i = Math.max(this.i, s.indexOf('>', this.i) + 1 || s.length);
      }
    }
    this.depth++;
    if (this.depth > MAX_DEPTH) throw new TooDeep();
    const alternatives = this.alternatives();
    this.depth--;
    if (s[this.i] === ')') this.i++;
    return { kind: 'group', alternatives, lookaround, behind, negative, capturing, ...this.quantifier() };
  }

  private quantifier(): { min: number; max: number } {
    const s = this.source;
    const c = s[this.i];
    let min = 1;
    let max = 1;
    if (c === '*' || c === '+' || c === '?') {
      min = c === '+' ? 1 : 0;
      max = c === '?' ? 1 : Infinity;
      this.i++;
    } else if (c === '{') {
      COUNTED.lastIndex = this.i;
      const m = COUNTED.exec(s);
      if (m === null) return { min, max };
      min = Number(m[1]);
      max = m[2] === undefined ? min : m[3] === '' ? Infinity : Number(m[3]);
      this.i += m[0].length;
    } else {
      return { min, max };
    }
    if (s[this.i] === '?') this.i++; // lazy: the same ways, tried in another order
    return { min, max };
  }
}

/**
 * Whether the pattern has a named group, as the engine reads it (a text search would also find
 * `(?<` inside a class or after a backslash): without `u`, a reference to a group that does not
 * exist is an error only in a pattern that names groups.
 */
export function namesGroups(source: string): boolean {
  try {
    new RegExp(`(?:${source})|\\k<zenovaNoSuchGroup>`);
    return false;
  } catch {
    return true;
  }
}

/** A run of a repetition over `set` starting here, with `ways` ways so far. */
function newRun(set: CharSet, literal: string | undefined, ways: number, budget: number): Run {
  return { set, literal, middles: [], ways, budget, key: `${budget}\u0000${set}` };
}

/** One code point written as itself: it matches only itself (without `i`). */
function isPlainCharacter(set: CharSet): boolean {
  return set.length <= 2 && set.length === String.fromCodePoint(set.codePointAt(0)!).length && !'\\[.'.includes(set[0]!);
}

class TooComplex extends Error {}
class TooDeep extends Error {}
class Found extends Error {}

/** Every code point once, lone surrogates included (each followed by a space so none pair up). */
function everyCharacter(): string {
  const units = new Uint16Array(0x10000 - 0x800 + 2 * 0x100000 + 2 * 0x800);
  let n = 0;
  for (let c = 0; c < 0x10000; c++) if (c < 0xd800 || c > 0xdfff) units[n++] = c;
  for (let v = 0; v < 0x100000; v++) {
    units[n++] = 0xd800 + (v >> 10);
    units[n++] = 0xdc00 + (v & 0x3ff);
  }
  for (let c = 0xd800; c <= 0xdfff; c++) {
    units[n++] = c;
    units[n++] = 0x20;
  }
  const parts: string[] = [];
  // apply, not spread: spreading a typed array walks its iterator (≈ 100 ms for the whole, against ≈ 17).
  for (let at = 0; at < n; at += 8192) parts.push(String.fromCharCode.apply(null, units.subarray(at, Math.min(n, at + 8192)) as unknown as number[]));
  return parts.join('');
}

// ≈ 4 MB, built on first need (only patterns with two unbounded class items get that far) and
// left to the garbage collector between policy loads.
let everyCharacterRef: WeakRef<{ text: string }> | undefined;
function allCharacters(): string {
  let held = everyCharacterRef?.deref();
  if (held === undefined) {
    held = { text: everyCharacter() };
    everyCharacterRef = new WeakRef(held);
  }
  return held.text;
}

/** Scan results by flags and sets: the same classes (`\w`, `\s`, `.`) come up in pattern after pattern. */
const scanned = new Map<string, boolean>();
const MAX_SCANNED = 1024;

/**
 * Why `source` is refused for the polynomial shape, or null. `source` must be a valid pattern under
 * `flags`. Its steps are added to `work` (refused past MAX_CHECK_STEPS).
 */
export function regexPolynomialRisk(source: string, flags: string, work: CheckWork = { steps: 0 }): string | null {
  let scansLeft = MAX_SCANS;
  const ignoreCase = flags.includes('i');
  const counted = new Set<string>();
  const compiled = new Map<string, RegExp | undefined>();
  /** `counted`: false for a scan's regex, whose compiling SCAN_STEPS covers (a cached scan skips it). */
  const compile = (body: string, counted = true): RegExp | undefined => {
    if (compiled.has(body)) return compiled.get(body);
    if (counted) spend(work, 1 + (body.length >> 5));
    let re: RegExp | undefined;
    try {
      re = new RegExp(body, flags);
    } catch {
      re = undefined;
    }
    compiled.set(body, re);
    return re;
  };
  /** Is there a character every set matches? */
  const meet = (sets: CharSet[], literal: string | undefined): boolean => {
    spend(work, sets.length);
    const known = sets.filter((s) => s !== ANY);
    if (known.length <= 1) return true;
    if (literal !== undefined) {
      // The run is one character (and, under `i`, its case variants, which every set folds alike).
      for (const set of known) {
        // A set written as the character itself matches it; without `i`, a set written as one
        // plain character (no escape, class or dot) matches only that one. No regex needed.
        if (set === literal) continue;
        if (!ignoreCase && isPlainCharacter(set)) return false;
        const re = compile(`^(?:${set})$`);
        if (re !== undefined && !re.test(literal)) return false;
      }
      return true;
    }
    const body = known.slice(0, -1).map((s) => `(?=${s})`).join('') + `(?:${known[known.length - 1]})`;
    const key = `${flags}\u0000${body}`;
    // Counted before the shared cache is read, once per distinct scan of this pattern: the verdict
    // must not depend on what the process checked before (a node that never saw these classes
    // would refuse the rule the control plane accepted, and block every request under it).
    if (!counted.has(key)) {
      counted.add(key);
      if (--scansLeft < 0) throw new TooComplex();
      spend(work, SCAN_STEPS);
    }
    const cached = scanned.get(key);
    if (cached !== undefined) return cached;
    const re = compile(body, false);
    const found = re === undefined ? true : re.test(allCharacters());
    if (scanned.size >= MAX_SCANNED) scanned.clear();
    scanned.set(key, found);
    return found;
  };
  /** A mandatory item after the runs: it is a middle of each run whose characters it meets. */
  const narrowed = (runs: Run[], meets: (run: Run) => boolean, set: CharSet, literal: string | undefined): Run[] => {
    spend(work, runs.length);
    return runs.filter(meets).map((run) => {
      spend(work, run.middles.length);
      if (run.middles.length >= MAX_MIDDLES || run.middles.some((m) => m.set === set)) return run;
      return { ...run, middles: [...run.middles, { set, literal }], key: `${run.key}\u0000${set}` };
    });
  };
  /** Can a text of the run's characters (its middles' in turn) also be matched by `set`? */
  const pumps = (run: Run, set: CharSet, literal: string | undefined): boolean =>
    meet([run.set, set], run.literal ?? literal) && run.middles.every((m) => meet([run.set, m.set, set], run.literal ?? m.literal ?? literal));
  /**
   * A repetition with `ways` ways over `set`: it multiplies the ways of every run it meets (refused
   * past MAX_WAYS when something after it can fail), keeps the runs it does not meet only if it can
   * be skipped, and starts a run of its own.
   */
  const repetition = (
    runs: Run[],
    rep: { set: CharSet; literal: string | undefined; ways: number; skippable: boolean; anchored: boolean; meets: (run: Run) => boolean },
    afterCanFail: boolean,
  ): Run[] => {
    spend(work, runs.length + 1);
    const out: Run[] = [];
    for (const run of runs) {
      if (rep.meets(run)) {
        const ways = Math.min(run.ways * rep.ways, run.budget + 1);
        if (ways > run.budget && afterCanFail) throw new Found();
        out.push({ ...run, ways });
      } else if (rep.skippable) {
        out.push(run);
      }
    }
    out.push(newRun(rep.set, rep.literal, rep.ways, rep.anchored ? ANCHORED_WAYS : MAX_WAYS));
    return capped(out);
  };
  const capped = (runs: Run[]): Run[] => {
    spend(work, runs.length);
    const seen = new Map<string, Run>();
    for (const r of runs) {
      const before = seen.get(r.key);
      if (before === undefined || before.ways < r.ways) seen.set(r.key, r);
    }
    const out = [...seen.values()];
    // Too many to follow: one run over anything, with the most ways, stands for them all
    // (over-estimates, never misses).
    return out.length > MAX_RUNS ? [newRun(ANY, undefined, Math.max(...out.map((r) => r.ways)), MAX_WAYS)] : out;
  };
  /** Does every try of these items succeed on the empty text (no assertion, nothing mandatory)? */
  const alwaysEmpty = (items: Item[]): boolean => {
    spend(work, 1 + items.length);
    return items.every((item) => (item.kind === 'char' && item.min === 0) || (item.kind === 'group' && !item.lookaround && (item.min === 0 || item.alternatives.some(alwaysEmpty))));
  };
  /** Can the item make a try fail (so that the ways to split the text before it are all tried)? */
  const canFail = (item: Item): boolean => {
    if (item.kind === 'assertion' || item.kind === 'backreference') return true;
    if (item.kind === 'char') return item.min > 0;
    return item.lookaround || (item.min > 0 && !item.alternatives.some(alwaysEmpty));
  };
  /** Every character the items can match, as one set (ANY past a back-reference or MAX_UNION_SETS). */
  const union = (alternatives: Item[][], into: Set<CharSet> = new Set()): Set<CharSet> | undefined => {
    for (const alt of alternatives) {
      spend(work, 1 + alt.length);
      for (const item of alt) {
        if (item.kind === 'backreference') return undefined;
        if (item.kind === 'char') into.add(item.set);
        else if (item.kind === 'group' && !item.lookaround && union(item.alternatives, into) === undefined) return undefined;
        if (into.size > MAX_UNION_SETS) return undefined;
      }
    }
    return into;
  };
  const unionSet = (alternatives: Item[][]): CharSet => {
    const sets = union(alternatives);
    return sets === undefined || sets.size === 0 ? ANY : sets.size === 1 ? [...sets][0]! : `(?:${[...sets].join('|')})`;
  };
  const capWays = (n: number): number => Math.min(n, UNBOUNDED_WAYS);
  /** The ways one item can match at one place (1 for a fixed one), capped at a window's. */
  const waysOf = (item: Item): number => {
    spend(work, 1);
    if (item.kind === 'assertion') return 1;
    if (item.kind === 'backreference') return UNBOUNDED_WAYS;
    if (item.max === Infinity) return UNBOUNDED_WAYS;
    const count = item.max - item.min + 1;
    if (item.kind === 'char') return capWays(count);
    if (item.lookaround) return 1;
    const body = capWays(item.alternatives.reduce((sum, alt) => sum + alt.reduce((product, i) => capWays(product * waysOf(i)), 1), 0));
    return capWays(count * body ** Math.min(item.max, 10));
  };
  /** A group meets a run when one of its alternatives matches something and has every mandatory character in the run's set. */
  const groupMeets = (alternatives: Item[][], set: CharSet) => (run: Run): boolean =>
    pumps(run, set, undefined) &&
    alternatives.some((alt) => alt.some((item) => item.kind !== 'assertion' && !(item.kind === 'group' && item.lookaround)) &&
      alt.every((item) => item.kind !== 'char' || item.min === 0 || meet([run.set, item.set], run.literal ?? item.literal)));
  /** A lookbehind's body, matched right to left: its items (and its groups' items) in reverse. */
  const reversed = (items: Item[]): Item[] =>
    (spend(work, 1 + items.length), items).map((item) => (item.kind === 'group' && !item.lookaround ? { ...item, alternatives: item.alternatives.map(reversed) } : item)).reverse();

  const parser = new Parser(source, flags.includes('u'), work);
  let backreferenceSet: CharSet = ANY;
  /** The top-level alternative being walked starts with `^`: one start per window (no `m` flag). */
  let startsAtCaret = false;

  /** Does a repetition over `set` at items[j] start right after `^` or a mandatory character outside `set`? */
  const anchoredAt = (items: Item[], j: number, set: CharSet, literal: string | undefined): boolean => {
    if (startsAtCaret) return true;
    for (let k = j - 1; k >= 0; k--) {
      spend(work, 1);
      const before = items[k]!;
      if (before.kind === 'assertion') {
        if (before.caret) return true;
        continue;
      }
      return before.kind === 'char' && before.min > 0 && waysOf(before) === 1 && !meet([before.set, set], before.literal ?? literal);
    }
    return false;
  };

  const walk = (items: Item[], entering: Run[], tailCanFail: boolean): Run[] => {
    spend(work, 1 + items.length);
    let runs = entering;
    // failsFrom[j]: something from item j on (or after the items) can fail.
    const failsFrom: boolean[] = new Array<boolean>(items.length + 1);
    failsFrom[items.length] = tailCanFail;
    for (let j = items.length - 1; j >= 0; j--) failsFrom[j] = failsFrom[j + 1]! || canFail(items[j]!);
    for (let j = 0; j < items.length; j++) {
      const item = items[j]!;
      const afterCanFail = failsFrom[j + 1]!;
      if (item.kind === 'assertion') continue;
      if (item.kind === 'backreference') {
        // Any text a capturing group matched, of any length, or nothing.
        const set = backreferenceSet;
        const anchored = anchoredAt(items, j, set, undefined);
        runs = repetition(runs, { set, literal: undefined, ways: UNBOUNDED_WAYS, skippable: true, anchored, meets: (run) => pumps(run, set, undefined) }, afterCanFail);
        continue;
      }
      if (item.kind === 'char') {
        const meets = (run: Run): boolean => pumps(run, item.set, item.literal);
        const ways = waysOf(item);
        if (ways > 1) {
          const anchored = anchoredAt(items, j, item.set, item.literal);
          runs = repetition(runs, { set: item.set, literal: item.literal, ways, skippable: item.min === 0, anchored, meets }, afterCanFail);
        }
        else if (item.min > 0) runs = narrowed(runs, (run) => meet([run.set, item.set], run.literal ?? item.literal), item.set, item.literal);
        continue;
      }
      if (item.lookaround) {
        // It matches no text of its own, but each try of the runs before it runs its body again
        // (a lookbehind's from right to left), so the runs go on into its body. A positive one's
        // own ways are tried until its body first matches (it is atomic: nothing after it
        // backtracks into it); a negative one's are all tried whenever it succeeds, and when its
        // body matches, it fails.
        // One walk per body (two would be 2^depth for nested lookarounds): with runs before it,
        // what follows decides for its own pairs too (more refusals, never fewer).
        const bodyTail = item.negative || (runs.length > 0 && afterCanFail);
        for (const alt of item.alternatives) walk(item.behind ? reversed(alt) : alt, runs, bodyTail);
        continue;
      }
      if (item.min === 1 && item.max === 1) {
        runs = capped(item.alternatives.flatMap((alt) => walk(alt, runs, afterCanFail)));
        continue;
      }
      // A quantified group (guardrail-regex-risk.ts has refused any repeated one with an unbounded
      // item inside): the runs go on into one pass (and another may follow it), then the group
      // counts as one item.
      for (const alt of item.alternatives) walk(alt, runs, true);
      const set = unionSet(item.alternatives);
      const skippable = item.min === 0 || item.alternatives.some(alwaysEmpty);
      const ways = waysOf(item);
      const meets = groupMeets(item.alternatives, set);
      if (ways > 1) runs = repetition(runs, { set, literal: undefined, ways, skippable, anchored: anchoredAt(items, j, set, undefined), meets }, afterCanFail);
      else if (!skippable) runs = narrowed(runs, meets, set, undefined);
    }
    return runs;
  };

  try {
    const alternatives = parser.alternatives();
    // What a back-reference can repeat: the characters of every capturing group (a superset of its own).
    const capturing: Item[][] = [];
    const collect = (alts: Item[][]): void => {
      for (const alt of alts) {
        spend(work, 1 + alt.length);
        for (const item of alt) {
          if (item.kind !== 'group') continue;
          if (item.capturing) capturing.push(...item.alternatives);
          collect(item.alternatives);
        }
      }
    };
    collect(alternatives);
    backreferenceSet = unionSet(capturing);
    for (const alt of alternatives) {
      const first = alt[0];
      startsAtCaret = first?.kind === 'assertion' && first.caret;
      walk(alt, [], false);
    }
    return null;
  } catch (err) {
    if (err instanceof Found) return POLYNOMIAL_RISK;
    if (err instanceof TooComplex) return TOO_MANY_CLASS_RUNS;
    if (err instanceof TooDeep) return TOO_DEEP;
    if (err instanceof OverBudget) return TOO_COSTLY;
    throw err;
  }
}
