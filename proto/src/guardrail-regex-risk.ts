/**
 * The backtracking shapes that make a JavaScript regex take exponential time, both inside a
 * repeated group: an item that is itself repeated (`(a+)+`, `(\w+\s?)+$`, `(?:x*y?)*`), or
 * alternatives that can match the same text (`(a|a)*`, `(\w|\d)+$`, `(.|\s)*x`). A few dozen
 * characters of caller text can then hold the event loop for seconds, and a regex cannot be
 * interrupted, so such patterns are refused, not run. Shared by both sides: the control plane
 * refuses them at the admin API; the node checks again for config that predates that check, and
 * fails closed on them.
 *
 * Overlap is judged on the first character each alternative can start with, conservatively: two
 * equal literals overlap, a class (`[…]`, `\w`, `\d`, `\s`, `.`, `\p{…}`) overlaps a literal it
 * contains and any other class, and a back-reference overlaps anything. So `(foo|bar)+`, `(\w|-)+`
 * and `(.|\n)*` pass, while `(ab|ac)+`, safe as it is, must be written `(a[bc])+`.
 *
 * A repetition with a small fixed bound is let through when nothing inside it repeats without
 * bound: `(\d{1,3}\.){3}` and the strict IPv4 group `((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}`
 * try at most a few hundred ways per start (the group's ways to match, raised to the count, within
 * MAX_BOUNDED_WAYS), whereas `(a+){3}` (unbounded inside) or `(\d{1,10}){16}` (10^16) are refused.
 *
 * A pattern free of both then goes through the polynomial check (guardrail-regex-runs.ts). The
 * two share one count of steps per pattern, refused past MAX_CHECK_STEPS (TOO_COSTLY), so the
 * verdict and its cost are the same on the control plane and every node.
 */

import { readEscape } from './guardrail-regex-escape.js';
import { namesGroups, OverBudget, regexPolynomialRisk, spend, TOO_COSTLY } from './guardrail-regex-runs.js';
import type { CheckWork } from './guardrail-regex-runs.js';

/** The most ways a bounded repetition may have to match at one start before it is refused. */
const MAX_BOUNDED_WAYS = 256;

/** Distinct first literals (or classes) tracked per group; past that it "may start with anything". */
const MAX_FIRST_LITERALS = 256;
const MAX_FIRST_CLASSES = 16;

/** The characters an alternative (or item) can start with. */
interface FirstSet {
  /** Unknown (a back-reference, or more than the caps): overlaps anything non-empty. */
  any: boolean;
  /** Literal characters (case-folded under ignoreCase). */
  literals: Set<string>;
  /** Character classes, each compiled to match exactly one character it contains. */
  classes: RegExp[];
}

/** One open group (the root pattern is one too). */
interface Frame {
  /** It holds an item whose length varies by repetition (a+, b*, c{2,5}), at any depth. */
  variable: boolean;
  /** It holds, at any depth, a group whose alternatives overlap. */
  ambiguous: boolean;
  /** It holds, at any depth, an item repeated without an upper bound (a+, b*, c{2,}, (ab)+). */
  unbounded: boolean;
  /**
   * Over-estimates of the ways its content can match at one start, capped at MAX_BOUNDED_WAYS + 1:
   * of the alternative being read (the product of its items'), and the sum and the largest of
   * those of its finished alternatives (only overlapping alternatives add up).
   */
  altWays: number;
  sumWays: number;
  maxWays: number;
  /** Two of its own alternatives can start with the same character. */
  overlap: boolean;
  /** A lookahead or lookbehind: it matches no text of its own. */
  lookaround: boolean;
  /** The union of the first sets of its alternatives read so far. */
  seen: FirstSet;
  /** One of its alternatives read so far can match the empty text. */
  nullable: boolean;
  /** The first set of the alternative being read. */
  current: FirstSet;
  /** Every item of the current alternative so far can match the empty text (its next item's first characters count too). */
  open: boolean;
  /** Some item read so far, in any of its alternatives, can consume a character (lookarounds' content aside). */
  consumes: boolean;
  /** Every item of the current alternative so far surely matches empty text first (see RegexShape.emptyFirst). */
  altEmptyFirst: boolean;
  /** Its first alternative surely matches empty text first; undefined until that alternative ends. */
  emptyFirst: boolean | undefined;
}

/** What the walk of a pattern found, besides backtracking risks. */
interface RegexShape {
  /** Why the pattern is refused for backtracking (nested or overlapping repetition), or null. */
  risk: string | null;
  /** It can consume a character somewhere: not only anchors, `\b`, lookarounds and zero counts. */
  consumes: boolean;
  /**
   * At every position the engine's first choice is an empty match that cannot fail: the first
   * alternative's items are all lazy-optional (`a*?`, `b??`), counted to zero, or groups whose first
   * alternative is so (`(|a)`). Nodes skip empty matches, so such a rule never fires. Anchors and
   * lookarounds can fail and hand over to the next choice, so they never count here.
   */
  emptyFirst: boolean;
  /** It holds `[]`, which in JavaScript matches no character (`[^]` matches any). */
  emptyClass: boolean;
}

const emptySet = (): FirstSet => ({ any: false, literals: new Set(), classes: [] });
const newFrame = (lookaround = false): Frame => ({
  variable: false, ambiguous: false, unbounded: false, altWays: 1, sumWays: 0, maxWays: 0, overlap: false, lookaround, seen: emptySet(), nullable: false, current: emptySet(), open: true,
  consumes: false, altEmptyFirst: true, emptyFirst: undefined,
});

function addInto(into: FirstSet, from: FirstSet): void {
  if (into.any) return;
  if (from.any || into.literals.size + from.literals.size > MAX_FIRST_LITERALS || into.classes.length + from.classes.length > MAX_FIRST_CLASSES) {
    into.any = true;
    into.literals.clear();
    into.classes.length = 0;
    return;
  }
  for (const c of from.literals) into.literals.add(c);
  into.classes.push(...from.classes);
}

/** a × b, capped just past the budget (so it never overflows to Infinity by accident). */
const timesWays = (a: number, b: number): number => Math.min(a * b, MAX_BOUNDED_WAYS + 1);

/** The ways `count` repetitions (from `min` to `max`) of something with `ways` ways can match, capped. */
function repeatedWays(ways: number, min: number, max: number): number {
  if (max === Infinity) return Infinity;
  let total = 1;
  // ways 1 repeated is still 1 way per count: stop once the product cannot grow.
  if (ways <= 1) return timesWays(total, max - min + 1);
  for (let k = 0; k < max && total <= MAX_BOUNDED_WAYS; k++) total = timesWays(total, ways);
  return timesWays(total, max - min + 1);
}

/**
 * The key two characters share when `(?i)` (the `iu` flags) makes them match each other: simple
 * case folding, approximated by upper- then lower-casing, so ſ and s, ς and σ, K (Kelvin) and k
 * meet; a character whose upper case is longer (ß → SS) keeps its lower case.
 */
function caseFolded(c: string): string {
  const upper = c.toUpperCase();
  return upper.length === c.length ? upper.toLowerCase() : c.toLowerCase();
}

/** `{n}`, `{n,}` or `{n,m}` at lastIndex (digits of any length: `{0000…1,}` is `+`). */
const COUNTED = /\{(\d+)(,(\d*))?\}/y;

/**
 * Why `source` (without the `(?i)` prefix) is refused, or null when it has neither risky shape.
 * `options.work`, when given, receives the steps the check took (for tests and callers that sum them).
 */
export function regexBacktrackingRisk(source: string, options: { ignoreCase?: boolean; work?: CheckWork } = {}): string | null {
  const work = options.work ?? { steps: 0 };
  const unicode = compilesWithU(source);
  // The exponential shapes first; then the polynomial one, under the flags the node uses.
  return readPattern(source, options.ignoreCase === true, unicode, work).risk
    ?? regexPolynomialRisk(source, `${options.ignoreCase === true ? 'i' : ''}${unicode ? 'u' : ''}`, work);
}

/**
 * Why a rule with pattern `source` (without the `(?i)` prefix) would never fire on a node, or null.
 * Nodes skip empty matches (they have nothing to mask or report), so a pattern that can only match
 * empty text, or whose first choice at every position is an empty match, finds nothing; the empty
 * class `[]` is refused here too. The admin API refuses such patterns; a pattern with a backtracking
 * risk gets null here (refused for that).
 */
export function regexNeverFiresReason(source: string, options: { ignoreCase?: boolean } = {}): string | null {
  const shape = readPattern(source, options.ignoreCase === true, compilesWithU(source), { steps: 0 });
  if (shape.risk !== null) return null;
  if (shape.emptyClass) {
    // Not always "never fires" ((?:[])|a still finds a), but always a slip: nothing can match it.
    return 'holds [], a class that matches no character in JavaScript ([^] is any character): write the characters it should match, or remove it';
  }
  if (!shape.consumes) {
    return 'can only match empty text (anchors, \\b and lookarounds match no characters) and nodes skip empty matches, so the rule would never fire: put the text to find outside the lookaround, e.g. confidential instead of (?=.*confidential)';
  }
  if (shape.emptyFirst) {
    return 'matches empty text first at every position (an empty first alternative as in (|a), or a lazy optional item such as a*? or a??) and nodes skip empty matches, so the rule would never fire: put the alternative that takes text first, e.g. (a|), or drop the lazy ?';
  }
  return null;
}

function compilesWithU(source: string): boolean {
  try {
    new RegExp(source, 'u');
    return true;
  } catch {
    return false;
  }
}

/** One walk over the pattern: its backtracking risk (exponential shapes only) and what it can match. */
function readPattern(source: string, ignoreCase: boolean, unicode: boolean, work: CheckWork): RegexShape {
  const refused = (risk: string): RegexShape => ({ risk, consumes: true, emptyFirst: false, emptyClass: false });
  try {
    return walkPattern(source, ignoreCase, unicode, work, refused);
  } catch (err) {
    if (err instanceof OverBudget) return refused(TOO_COSTLY);
    throw err;
  }
}

function walkPattern(source: string, ignoreCase: boolean, unicode: boolean, work: CheckWork, refused: (risk: string) => RegexShape): RegexShape {
  // Without `u`, `\k<` is a back-reference only when the pattern names a group (else the text `k<`).
  const namedReferences = unicode || namesGroups(source);
  const frames: Frame[] = [newFrame()];
  const top = (): Frame => frames[frames.length - 1]!;
  // Class-against-literal tests run a regex each: bounded by the pattern's length, past which
  // alternatives are taken to overlap.
  let testsLeft = source.length + 64;
  // The ways of every bounded repetition let through below, multiplied: they apply one after the
  // other ((a|a){8}(a|a){8} tries 256 × 256), so they share one budget.
  let boundedWays = 1;
  let emptyClass = false;
  let i = 0;

  const literal = (c: string): FirstSet => ({ any: false, literals: new Set([ignoreCase ? caseFolded(c) : c]), classes: [] });
  const charClass = (classSource: string): FirstSet => {
    spend(work, 1 + (classSource.length >> 5));
    const whole = `^(?:${classSource})$`;
    for (const flags of ignoreCase ? ['iu', 'i'] : ['u', '']) {
      try {
        return { any: false, literals: new Set(), classes: [new RegExp(whole, flags)] };
      } catch {
        // Not valid in this mode; try the other.
      }
    }
    return { any: true, literals: new Set(), classes: [] };
  };
  const addCounted = (into: FirstSet, from: FirstSet): void => {
    spend(work, 1 + from.literals.size + from.classes.length);
    addInto(into, from);
  };
  const anything: FirstSet = { any: true, literals: new Set(), classes: [] };
  const nothing: FirstSet = emptySet();

  const classHas = (re: RegExp, c: string): boolean => {
    spend(work, 1);
    testsLeft--;
    return testsLeft < 0 || re.test(c);
  };
  const overlaps = (a: FirstSet, b: FirstSet): boolean => {
    spend(work, 1 + Math.min(a.literals.size, b.literals.size));
    const emptyA = !a.any && a.literals.size === 0 && a.classes.length === 0;
    const emptyB = !b.any && b.literals.size === 0 && b.classes.length === 0;
    if (emptyA || emptyB) return false;
    if (a.any || b.any || (a.classes.length > 0 && b.classes.length > 0)) return true;
    const [small, large] = a.literals.size <= b.literals.size ? [a, b] : [b, a];
    for (const c of small.literals) if (large.literals.has(c)) return true;
    for (const re of a.classes) for (const c of b.literals) if (classHas(re, c)) return true;
    for (const re of b.classes) for (const c of a.literals) if (classHas(re, c)) return true;
    return false;
  };
  /** The current alternative of the innermost group ends (at `|` or `)`). */
  const endAlternative = (frame: Frame): void => {
    if (!frame.overlap && overlaps(frame.seen, frame.current)) frame.overlap = true;
    frame.sumWays = Math.min(frame.sumWays + frame.altWays, MAX_BOUNDED_WAYS + 1);
    frame.maxWays = Math.max(frame.maxWays, frame.altWays);
    frame.altWays = 1;
    addCounted(frame.seen, frame.current);
    if (frame.open) frame.nullable = true;
    frame.emptyFirst ??= frame.altEmptyFirst;
    frame.current = emptySet();
    frame.open = true;
    frame.altEmptyFirst = true;
  };

  /** Reads a quantifier at `i`, if any: can it repeat (more than once), is its count variable, may it match zero times? */
  const quantifier = (): { repeats: boolean; variable: boolean; optional: boolean; min: number; max: number; lazy: boolean } => {
    const c = source[i];
    let min = 1;
    let max = 1;
    if (c === '*' || c === '+' || c === '?') {
      min = c === '+' ? 1 : 0;
      max = c === '?' ? 1 : Infinity;
      i++;
    } else if (c === '{') {
      COUNTED.lastIndex = i;
      const m = COUNTED.exec(source);
      if (m === null) return { repeats: false, variable: false, optional: false, min: 1, max: 1, lazy: false };
      min = Number(m[1]);
      max = m[2] === undefined ? min : m[3] === '' ? Infinity : Number(m[3]);
      i += m[0].length;
    } else {
      return { repeats: false, variable: false, optional: false, min: 1, max: 1, lazy: false };
    }
    const lazy = source[i] === '?';
    if (lazy) i++;
    // `?` counts as variable too: (a?a)+ or (ab?|b)+ split one text many ways.
    return { repeats: max > 1, variable: max > min, optional: min === 0, min, max, lazy };
  };
  /** Whether a quantifier makes its item take the empty match first, whatever the item is. */
  const zeroFirst = (q: { min: number; max: number; lazy: boolean }): boolean => q.max === 0 || (q.min === 0 && q.lazy);
  /** An item just read, with the characters it can start with; its quantifier follows. */
  const item = (first: FirstSet, nullable = false): void => {
    const q = quantifier();
    const frame = top();
    if (!nullable && q.max > 0) frame.consumes = true;
    if (!zeroFirst(q)) frame.altEmptyFirst = false;
    if (q.variable) frame.variable = true;
    if (q.max === Infinity) frame.unbounded = true;
    else if (q.max > q.min) frame.altWays = timesWays(frame.altWays, q.max - q.min + 1);
    if (!frame.open) return;
    addCounted(frame.current, first);
    if (!nullable && !q.optional) frame.open = false;
  };
  /** The escape at `i` (a backslash): what it matches, with `i` moved past it. */
  const escape = (): { first: FirstSet; zeroWidth?: boolean } => {
    const start = i;
    const read = readEscape(source, i, unicode, namedReferences);
    i = read.end;
    if (read.kind === 'assertion') return { first: nothing, zeroWidth: true };
    if (read.kind === 'backreference') return { first: anything };
    return { first: read.literal !== undefined ? literal(read.literal) : charClass(source.slice(start, i)) };
  };

  while (i < source.length) {
    spend(work, 1);
    const c = source[i]!;
    if (c === '\\') {
      const { first, zeroWidth } = escape();
      item(first, zeroWidth);
    } else if (c === '[') {
      // A class is one item: skip to its unescaped end (in JavaScript `[]` is an empty class and
      // `[^]` any character: a `]` first closes it).
      const start = i;
      i++;
      if (source[i] === '^') i++;
      while (i < source.length && source[i] !== ']') i += source[i] === '\\' ? 2 : 1;
      i++;
      if (source.slice(start, i) === '[]') emptyClass = true;
      item(charClass(source.slice(start, i)));
    } else if (c === '(') {
      i++;
      let lookaround = false;
      if (source[i] === '?') {
        const kind = source.slice(i, i + 3);
        if (kind.startsWith('?:') || kind.startsWith('?=') || kind.startsWith('?!')) {
          lookaround = kind[1] !== ':';
          i += 2;
        } else if (kind === '?<=' || kind === '?<!') {
          lookaround = true;
          i += 3;
        } else if (kind.startsWith('?<')) {
          i = Math.max(i, source.indexOf('>', i) + 1 || source.length); // a named group
        }
      }
      frames.push(newFrame(lookaround));
    } else if (c === ')') {
      // A stray `)` (invalid anyway) closes nothing.
      const inner = frames.length > 1 ? frames.pop()! : newFrame();
      endAlternative(inner);
      i++;
      const q = quantifier();
      // A small fixed bound over content with no unbounded repetition tries few ways: allowed.
      // Overlapping alternatives may each be tried at the same place.
      const ways = inner.unbounded ? Infinity : repeatedWays(inner.overlap ? inner.sumWays : inner.maxWays, q.min, q.max);
      const risky = q.repeats && (inner.variable || inner.overlap || inner.ambiguous);
      const bounded = q.max !== Infinity && ways <= MAX_BOUNDED_WAYS && (!risky || boundedWays * ways <= MAX_BOUNDED_WAYS);
      if (risky && bounded) boundedWays *= ways;
      if (q.repeats && inner.variable && !bounded) return refused('it repeats a group that itself contains a repeated item (nested quantifiers such as (a+)+), which can take exponential time');
      if (q.repeats && (inner.overlap || inner.ambiguous) && !bounded) {
        return refused('it repeats a group whose alternatives can start with the same character (overlapping alternatives such as (a|a)* or (\\w|\\d)+), which can take exponential time');
      }
      const outer = top();
      if (!inner.lookaround && inner.consumes && q.max > 0) outer.consumes = true;
      // A greedy repetition past its minimum refuses an empty iteration (the engine's rule), so it
      // backtracks into the group's other choices: (|a)* and (|a)+ do match a.
      const emptyGroup = inner.emptyFirst === true && !inner.lookaround && (q.lazy || q.max === q.min);
      if (!zeroFirst(q) && !emptyGroup) outer.altEmptyFirst = false;
      if (q.variable || inner.variable) outer.variable = true;
      if (inner.overlap || inner.ambiguous) outer.ambiguous = true;
      if (inner.unbounded || q.max === Infinity) outer.unbounded = true;
      else outer.altWays = timesWays(outer.altWays, ways);
      if (outer.open) {
        addCounted(outer.current, inner.lookaround ? nothing : inner.seen);
        if (!inner.lookaround && !inner.nullable && !q.optional) outer.open = false;
      }
    } else if (c === '|') {
      i++;
      endAlternative(top());
    } else if (c === '^' || c === '$') {
      i++;
      item(nothing, true);
    } else if (c === '.') {
      i++;
      item(charClass('.'));
    } else {
      // One character, astral ones included.
      const ch = String.fromCodePoint(source.codePointAt(i)!);
      i += ch.length;
      item(literal(ch));
    }
  }
  const root = frames[0]!;
  return { risk: null, consumes: root.consumes, emptyFirst: root.emptyFirst ?? root.altEmptyFirst, emptyClass };
}
