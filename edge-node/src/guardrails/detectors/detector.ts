/**
 * What every guardrail detector is: a pure function finding matches in a string, plus what the
 * policy engine needs to mask them and to scan a stream (its hold-back window).
 */

/** A match: text.slice(start, end). Matches of one detector never overlap and come in order. */
export interface Match {
  start: number;
  end: number;
  /**
   * Where the text that makes this a match begins, when before `start` (an assignment's name before
   * its value): a stream guard holds it with the match, never releasing the one without the other,
   * or the next scan would see the value without what says it is a secret.
   */
  holdFrom?: number;
  /**
   * Of a match merged from overlapping ones (mergeMatches): the one that reaches its end. Past its
   * hold cap a stream guard keeps that one's head to recognise the rest (a PEM block that a long
   * `password=` value runs into: the head of the value alone would not see the block go on).
   */
  tail?: Match;
}

export type DetectorName = 'regex' | 'keywords' | 'email' | 'phone' | 'prc-resident-id' | 'bank-card' | 'secret';

export interface Detector {
  readonly name: DetectorName;
  /** What a `mask` action writes in place of a match. */
  readonly placeholder: string;
  /**
   * The longest text a match may need before it is recognised as one. A stream guard holds back
   * this many trailing characters so a match split across deltas is still caught.
   */
  readonly window: number;
  /**
   * Matches in `text` starting at or after `from`; text before `from` is only context (what
   * precedes a match, e.g. to refuse digits that are part of a longer run). `matchedTo` (a stream's
   * scan): where the last match this detector found before `from` ends, 0 for none in `text`. The
   * whole text's scan went on after that match, so no new one is read from text inside it (a
   * secret's name inside a value masked already).
   */
  readonly find: (text: string, from?: number, matchedTo?: number) => Match[];
  /**
   * For shapes still undecided at the end of `text` that a window alone does not hold back (a JWT
   * before its second dot, an assignment whose quote is open, a Bearer token too short to tell):
   * that possible match (`start`: where a mask would begin; `holdFrom`: what makes it one, such as
   * the name before a value; `end`: the end of `text`), else null. `from` as in `find`. A stream
   * guard holds text from its holdFrom until the shape completes or fails; its hold cap masks one
   * it cannot hold any longer rather than let it out.
   */
  readonly partial?: (text: string, from: number) => Match | null;
  /**
   * More matches in `text`, a whole string value of a JSON object read as structured data (or a
   * string item of an array there), given its object key `name` (TextSlot.jsonKey): what the text
   * alone does not show (the secret detector reads `{"password": "…"}` as it reads `password=…`).
   * Merged with `find`'s.
   */
  readonly findValueOf?: (name: string, text: string) => Match[];
}

/**
 * Runs a global (`g`) regex over `text` from `from`, keeping the matches `accept` takes (it may
 * narrow a match to a part of it). Empty matches are skipped so a pattern like `a*` cannot loop.
 */
export function regexMatches(
  re: RegExp,
  text: string,
  from: number,
  accept?: (m: RegExpExecArray) => Match | null,
): Match[] {
  const out: Match[] = [];
  re.lastIndex = from;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    if (m[0].length === 0) {
      re.lastIndex = m.index + 1;
      continue;
    }
    const match = accept === undefined ? { start: m.index, end: m.index + m[0].length } : accept(m);
    if (match !== null) out.push(match);
    else re.lastIndex = m.index + 1;
  }
  return out;
}

/**
 * Merges match lists found by several patterns into matches that do not overlap, in order: matches
 * that overlap become one spanning them all. Keeping only the earliest let a later, longer one run
 * on unmasked (`password=x-----BEGIN … PRIVATE KEY-----`: the assignment's value ends inside the
 * PEM block's first line, and the key's body went out in clear).
 */
export function mergeMatches(lists: Match[][]): Match[] {
  const all = lists.flat().sort((a, b) => a.start - b.start || b.end - a.end);
  const out: Match[] = [];
  for (const m of all) {
    const last = out[out.length - 1];
    if (last === undefined || m.start >= last.end) {
      out.push({ ...m });
      continue;
    }
    if (m.end > last.end) {
      last.end = m.end;
      last.tail = m.tail ?? m;
    }
    if (m.holdFrom !== undefined && m.holdFrom < (last.holdFrom ?? last.start)) last.holdFrom = m.holdFrom;
  }
  return out;
}
