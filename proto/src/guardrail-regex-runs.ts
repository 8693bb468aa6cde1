/**
 * The polynomial backtracking shape: two unbounded repetitions in a row that can match the same
 * characters (`a*a*b`, `\s*\s*x`, `\w+\s*\w+x`, `.*x.*y`), with something after them that can
 * fail. A run of those characters can then be split between them in as many ways as it is long, at
 * every start: on a failing run of n characters, time of order n³ for two (`a*a*b`: half a second
 * on 1 100 characters with the `u` flag the node uses), n⁴ for three (`a*a*a*b`: 48 s on 1 024).
 * The node scans long texts in windows of 1 024 characters, which bounds a single unbounded
 * repetition (`.*x`, quadratic) to about a millisecond per window, but not these. V8's linear-time
 * fallback engine does not take the `u` or `i` flags, so such patterns are refused, like the
 * exponential shapes in guardrail-regex-risk.ts.
 *
 * The check walks each sequence of the pattern carrying "runs": an unbounded item's characters,
 * narrowed by every mandatory item after it (which the same run of text must also match). A later
 * unbounded item whose characters meet a run, with anything after it that can fail (a mandatory
 * item, an anchor, `\b`, a lookaround), is the shape. Character sets are compared exactly, by the
 * engine itself under the pattern's flags (`(?i)` folding included): a literal is tested against
 * the other sets; two classes by searching a string of every code point for a character both
 * match. An item that is optional keeps the runs before it alive (it can be skipped); a repeated
 * group counts as one item over every character inside it; a back-reference matches anything.
 * `\w+@\w+`, `\d+\.\d+`, `\w+\s+\w+`, `password\s*[:=]\s*\S+` and `foo.*bar` pass;
 * a trailing pair that cannot fail (`.*foo.*`) passes too: its first try succeeds.
 */

/** A regex source matching exactly one character of an item; ANY when it is not known. */
type CharSet = string;
const ANY: CharSet = '[\\s\\S]';

type Item =
  | { kind: 'char'; set: CharSet; literal: string | undefined; min: number; max: number }
  | { kind: 'group'; alternatives: Item[][]; lookaround: boolean; behind: boolean; capturing: boolean; min: number; max: number }
  | { kind: 'backreference' }
  | { kind: 'assertion' };

interface Middle {
  set: CharSet;
  literal: string | undefined;
}

/**
 * An unbounded item and the mandatory items after it so far: a text that repeats one character of
 * each in turn can be split between it and a later unbounded item in as many ways as it repeats,
 * if every one of those characters is also in both unbounded items' sets.
 */
interface Run {
  set: CharSet;
  literal: string | undefined;
  /** Distinct by set, at most MAX_MIDDLES (past that, later ones are not required: more refusals, never fewer). */
  middles: Middle[];
}

/**
 * A repetition whose count can vary by this much or more counts as unbounded: two of them in a
 * row over 1 000 characters (`.{0,1000}x.{0,1000}y`) are as slow as `.*x.*y` within a window.
 */
const LONG_SPAN = 32;
/** Past these, the check gives up and refuses the pattern (a scan takes 5–80 ms). */
const MAX_RUNS = 64;
const MAX_MIDDLES = 64;
const MAX_SCANS = 24;
const MAX_DEPTH = 64;

export const TOO_MANY_CLASS_RUNS =
  `it compares more than ${MAX_SCANS} pairs of repeated character classes, more than the check for slow shapes takes on: split it into several rules`;
export const TOO_DEEP = `it nests groups more than ${MAX_DEPTH} deep`;
export const POLYNOMIAL_RISK =
  `it has two repetitions in a row (unbounded, or varying by ${LONG_SPAN} or more) that can match the same characters (such as a*a*b, \\s*\\s*x, \\w+\\s*\\w+x or .*x.*y), which can take polynomial time: seconds on a few thousand characters`;

/** `{n}`, `{n,}` or `{n,m}` at lastIndex (digits of any length: `{0000…1,}` is `+`). */
const COUNTED = /\{(\d+)(,(\d*))?\}/y;

class Parser {
  i = 0;
  depth = 0;
  constructor(readonly source: string, readonly unicode: boolean) {}

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
    const s = this.source;
    const c = s[this.i]!;
    if (c === '(') return this.group();
    if (c === '^' || c === '$') {
      this.i++;
      this.quantifier();
      return { kind: 'assertion' };
    }
    if (c === '\\') {
      const next = s[this.i + 1] ?? '';
      if (next === 'b' || next === 'B') {
        this.i += 2;
        this.quantifier();
        return { kind: 'assertion' };
      }
      if ((next === 'k' && s[this.i + 2] === '<') || /[1-9]/.test(next)) {
        this.i += 2;
        if (next === 'k') this.i = Math.max(this.i, s.indexOf('>', this.i) + 1 || s.length);
        else while (/\d/.test(s[this.i] ?? '')) this.i++;
        this.quantifier();
        return { kind: 'backreference' };
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
      const e = s[this.i + 1] ?? '';
      this.i += 2;
      if (this.unicode && (e === 'p' || e === 'P') && s[this.i] === '{') {
        this.i = Math.max(this.i, s.indexOf('}', this.i) + 1 || s.length);
        return undefined;
      }
      if (this.unicode && e === 'u' && s[this.i] === '{') {
        const end = s.indexOf('}', this.i);
        const code = parseInt(s.slice(this.i + 1, end), 16);
        this.i = end < 0 ? s.length : end + 1;
        return Number.isInteger(code) && code <= 0x10ffff ? String.fromCodePoint(code) : undefined;
      }
      const hex = e === 'x' ? 2 : e === 'u' ? 4 : 0;
      const digits = s.slice(this.i, this.i + hex);
      if (hex > 0 && digits.length === hex && /^[0-9a-fA-F]+$/.test(digits)) {
        this.i += hex;
        const code = parseInt(digits, 16);
        // Under `u`, `\uD83D\uDE00` is one character.
        const low = /^\\u([dD][c-fC-F][0-9a-fA-F]{2})/.exec(s.slice(this.i, this.i + 6));
        if (this.unicode && e === 'u' && code >= 0xd800 && code <= 0xdbff && low !== null) {
          this.i += 6;
          return String.fromCharCode(code, parseInt(low[1]!, 16));
        }
        return String.fromCharCode(code);
      }
      if (e === 'c') {
        this.i++;
        return undefined;
      }
      // \d \w \s and their negations, and single escapes (\n, \t, …), are compared by the engine.
      if (/[a-zA-Z0-9]/.test(e)) return undefined;
      return e;
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
    let capturing = true;
    if (s[this.i] === '?') {
      const kind = s.slice(this.i, this.i + 3);
      capturing = false;
      if (kind.startsWith('?:')) this.i += 2;
      else if (kind.startsWith('?=') || kind.startsWith('?!')) {
        lookaround = true;
        this.i += 2;
      } else if (kind === '?<=' || kind === '?<!') {
        lookaround = true;
        behind = true;
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
    return { kind: 'group', alternatives, lookaround, behind, capturing, ...this.quantifier() };
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
  for (let at = 0; at < n; at += 8192) parts.push(String.fromCharCode(...units.subarray(at, Math.min(n, at + 8192))));
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

/** Why `source` is refused for the polynomial shape, or null. `source` must be a valid pattern under `flags`. */
export function regexPolynomialRisk(source: string, flags: string): string | null {
  let scansLeft = MAX_SCANS;
  const compiled = new Map<string, RegExp | undefined>();
  const compile = (body: string): RegExp | undefined => {
    if (compiled.has(body)) return compiled.get(body);
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
    const known = sets.filter((s) => s !== ANY);
    if (known.length <= 1) return true;
    if (literal !== undefined) {
      // The run is one character (and, under `i`, its case variants, which every set folds alike).
      for (const set of known) {
        const re = compile(`^(?:${set})$`);
        if (re !== undefined && !re.test(literal)) return false;
      }
      return true;
    }
    const body = known.slice(0, -1).map((s) => `(?=${s})`).join('') + `(?:${known[known.length - 1]})`;
    const key = `${flags}\u0000${body}`;
    const cached = scanned.get(key);
    if (cached !== undefined) return cached;
    if (--scansLeft < 0) throw new TooComplex();
    const re = compile(body);
    const found = re === undefined ? true : re.test(allCharacters());
    if (scanned.size >= MAX_SCANNED) scanned.clear();
    scanned.set(key, found);
    return found;
  };
  /** A mandatory item after the runs: it is a middle of each run whose characters it meets. */
  const narrowed = (runs: Run[], set: CharSet, literal: string | undefined): Run[] =>
    runs.filter((run) => meet([run.set, set], run.literal ?? literal)).map((run) => {
      if (run.middles.length >= MAX_MIDDLES || run.middles.some((m) => m.set === set)) return run;
      return { ...run, middles: [...run.middles, { set, literal }] };
    });
  /** A new unbounded item over `set`: a pair if it meets a run and something after it can fail; then it starts a run. */
  const unbounded = (runs: Run[], set: CharSet, literal: string | undefined, skippable: boolean, afterCanFail: boolean): Run[] => {
    if (afterCanFail) {
      for (const run of runs) {
        const pumped = (m: Middle): boolean => meet([run.set, m.set, set], run.literal ?? m.literal ?? literal);
        if (meet([run.set, set], run.literal ?? literal) && run.middles.every(pumped)) throw new Found();
      }
    }
    const started: Run = { set, literal, middles: [] };
    return skippable ? capped([...runs, started]) : [started];
  };
  const capped = (runs: Run[]): Run[] => {
    const seen = new Set<string>();
    const out = runs.filter((r) => {
      const key = [r.set, ...r.middles.map((m) => m.set)].join('\u0000');
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    });
    // Too many to follow: one run over anything stands for them all (over-estimates, never misses).
    return out.length > MAX_RUNS ? [{ set: ANY, literal: undefined, middles: [] }] : out;
  };
  /** Does every try of these items succeed on the empty text (no assertion, nothing mandatory)? */
  const alwaysEmpty = (items: Item[]): boolean =>
    items.every((item) => (item.kind === 'char' && item.min === 0) || (item.kind === 'group' && !item.lookaround && (item.min === 0 || item.alternatives.some(alwaysEmpty))));
  /** Can the item make a try fail (so that the ways to split the text before it are all tried)? */
  const canFail = (item: Item): boolean => {
    if (item.kind === 'assertion' || item.kind === 'backreference') return true;
    if (item.kind === 'char') return item.min > 0;
    return item.lookaround || (item.min > 0 && !item.alternatives.some(alwaysEmpty));
  };
  /** Every character the items can match, as one set (ANY past a back-reference). */
  const union = (alternatives: Item[][], into: CharSet[] = []): CharSet[] | undefined => {
    for (const alt of alternatives) {
      for (const item of alt) {
        if (item.kind === 'backreference') return undefined;
        if (item.kind === 'char') into.push(item.set);
        else if (item.kind === 'group' && !item.lookaround && union(item.alternatives, into) === undefined) return undefined;
      }
    }
    return into;
  };
  const unionSet = (alternatives: Item[][]): CharSet => {
    const sets = union(alternatives);
    return sets === undefined || sets.length === 0 ? ANY : `(?:${[...new Set(sets)].join('|')})`;
  };
  const long = (min: number, max: number): boolean => max === Infinity || max - min >= LONG_SPAN;
  /** A lookbehind's body, matched right to left: its items (and its groups' items) in reverse. */
  const reversed = (items: Item[]): Item[] =>
    items.map((item) => (item.kind === 'group' && !item.lookaround ? { ...item, alternatives: item.alternatives.map(reversed) } : item)).reverse();

  const parser = new Parser(source, flags.includes('u'));
  let backreferenceSet: CharSet = ANY;

  const walk = (items: Item[], entering: Run[], tailCanFail: boolean): Run[] => {
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
        runs = unbounded(runs, backreferenceSet, undefined, true, afterCanFail);
        continue;
      }
      if (item.kind === 'char') {
        if (long(item.min, item.max)) runs = unbounded(runs, item.set, item.literal, item.min === 0, afterCanFail);
        else if (item.min > 0) runs = narrowed(runs, item.set, item.literal);
        continue;
      }
      if (item.lookaround) {
        // It matches no text of the sequence's own; its body is a pattern of its own that
        // succeeds at its end (a lookbehind's end is its left, as it is matched backwards).
        for (const alt of item.alternatives) walk(item.behind ? reversed(alt) : alt, [], false);
        continue;
      }
      if (item.max <= 1) {
        const out = item.alternatives.flatMap((alt) => walk(alt, runs, afterCanFail));
        runs = capped(item.min === 0 ? [...runs, ...out] : out);
        continue;
      }
      // A repeated group (guardrail-regex-risk.ts has refused any with an unbounded item inside):
      // pairs within one pass, then the group as one item over all its characters.
      for (const alt of item.alternatives) walk(alt, [], true);
      const set = unionSet(item.alternatives);
      const skippable = item.min === 0 || item.alternatives.some(alwaysEmpty);
      if (long(item.min, item.max)) runs = unbounded(runs, set, undefined, skippable, afterCanFail);
      else if (!skippable) runs = narrowed(runs, set, undefined);
    }
    return runs;
  };

  try {
    const alternatives = parser.alternatives();
    // What a back-reference can repeat: the characters of every capturing group (a superset of its own).
    const capturing: Item[][] = [];
    const collect = (alts: Item[][]): void => {
      for (const alt of alts) {
        for (const item of alt) {
          if (item.kind !== 'group') continue;
          if (item.capturing) capturing.push(...item.alternatives);
          collect(item.alternatives);
        }
      }
    };
    collect(alternatives);
    backreferenceSet = unionSet(capturing);
    for (const alt of alternatives) walk(alt, [], false);
    return null;
  } catch (err) {
    if (err instanceof Found) return POLYNOMIAL_RISK;
    if (err instanceof TooComplex) return TOO_MANY_CLASS_RUNS;
    if (err instanceof TooDeep) return TOO_DEEP;
    throw err;
  }
}
