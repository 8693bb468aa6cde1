// Payment card numbers: 13-19 digits, optionally grouped by single spaces or dashes, passing the
// Luhn check, starting with 3-6 (Amex/JCB/Diners 3, Visa 4, Mastercard 5, Discover/UnionPay 6) or
// a 2-series range (Mir 2200-2204, Mastercard 2221-2720), so that millisecond timestamps (1…) and
// order numbers or date-time stamps written yyyyMMddHHmmss (20…) are left alone.
import type { Detector, Match } from './detector.js';
import { foldWidth } from './fold-width.js';

// Runs are found by a plain character loop, not a regex: a run of digit groups can be as long as
// the body, and both a regex and a per-group exec cost far more per character on one that long.
const MIN_DIGITS = 13;
const MAX_DIGITS = 19;
// 19 digits and 18 separators, plus the neighbour that tells a run has ended: a card of a longer
// run is found once this much follows its start (the walk resumes inside the run, see resumeRun).
// What is glued after a card is read only this far from its start (inHexToken).
const WINDOW = 40;

/** True when the digit string passes the Luhn (mod 10) check. */
export function luhnValid(digits: string): boolean {
  let sum = 0;
  let double = false;
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return false;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double = !double;
  }
  return digits.length > 0 && sum % 10 === 0;
}

function isCard(digits: string): boolean {
  if (digits.length < MIN_DIGITS || digits.length > MAX_DIGITS) return false;
  const first = digits.charCodeAt(0) - 48;
  if (first === 2) {
    // Only the issued 2-series ranges: 20xx (dates) and 21xx were never card numbers.
    const prefix = Number(digits.slice(0, 4));
    if (!((prefix >= 2200 && prefix <= 2204) || (prefix >= 2221 && prefix <= 2720))) return false;
  } else if (first < 3 || first > 6) {
    return false;
  }
  return luhnValid(digits);
}

/**
 * Cards inside one run. The whole run first; when it is not a card (say a date glued to a card
 * by a space), every card made of whole consecutive groups, where every group but the last has at
 * least 4 digits (4-4-4-4, 4-6-5, 4-4-4-4-3 are how cards are written).
 */
function cardsInRun(text: string, runStart: number, runEnd: number, digitCount: number, out: Match[]): void {
  if (digitCount <= MAX_DIGITS && isCard(text.slice(runStart, runEnd).replace(/[ -]/g, '')) && !inHexToken(text, runStart, runEnd, WINDOW)) {
    out.push({ start: runStart, end: runEnd });
    return;
  }
  cardsInGroups(text, runStart, runStart, runEnd, out);
}

/**
 * The group walk of `cardsInRun` from the group starting at `walkFrom` (`runStart`: -1 when before
 * it, unknown). Each group start yields its longest card, and cards that overlap are one match
 * spanning them all: taking the leftmost left the rest of a real card in clear
 * (`30003 4532 0151 1283 0366`: a 13-digit card ends inside the 16-digit one).
 */
function cardsInGroups(text: string, runStart: number, walkFrom: number, runEnd: number, out: Match[]): void {
  // Groups are walked in place: a run can hold millions of one-digit groups.
  for (let i = walkFrom; i < runEnd; ) {
    const iEnd = groupEnd(text, i, runEnd);
    // Every group but the last has 4 or more digits: a shorter group starts no card.
    if (iEnd - i >= 4) {
      // Grow the candidate group by group; stop past 19 digits or after a group too short to be inner.
      let digits = '';
      let best = -1;
      // One group on its own is a card when spaces set it apart ("2024-01-15 4111111111111111"); a
      // dash glues it to its neighbour ("1-4111111111111111" is an id, not a card).
      const apart = (i === runStart || text.charCodeAt(i - 1) === SPACE) && (iEnd === runEnd || text.charCodeAt(iEnd) === SPACE);
      for (let j = i, jEnd = iEnd; ; ) {
        digits += text.slice(j, jEnd);
        if (digits.length > MAX_DIGITS) break;
        if ((j > i || apart) && isCard(digits) && !inHexToken(text, i, jEnd, WINDOW)) best = jEnd;
        if (jEnd - j < 4 || jEnd >= runEnd) break;
        j = jEnd + 1; // past the single separator
        jEnd = groupEnd(text, j, runEnd);
      }
      if (best >= 0) {
        // Candidates come in order of their starts: one that starts inside the last match grows it.
        const last = out[out.length - 1];
        if (last !== undefined && i < last.end) last.end = Math.max(last.end, best);
        else out.push({ start: i, end: best });
      }
    }
    i = iEnd + 1;
  }
}

// How far a hex token is read on each side of a digit run: a UUID's length. Before the run this
// stays within the 64 characters a stream guard keeps as context.
const HEX_PIECE = 36;

/**
 * What is glued to a digit run on one side, read from `at` on, in `step` direction, up to `limit`
 * (excluded): 0 nothing, or not a hex token (a word with a letter past `f`, digits and dashes only,
 * which the run rules judge, or a URL escape such as `%3A`); 1 hex letters only (`CC`, `abc`);
 * 2 hex letters and digits (`3a`, `e65-8a3c`: a hash or UUID).
 */
function hexPiece(text: string, at: number, step: 1 | -1, limit: number): 0 | 1 | 2 {
  let letter = false;
  let digit = false;
  let n = 0;
  for (let k = at; n < HEX_PIECE && (step > 0 ? k < limit : k > limit); k += step, n++) {
    const code = text.charCodeAt(k);
    const lower = code | 0x20; // an ASCII letter in lower case
    if (lower >= 0x61 && lower <= 0x66) letter = true;
    else if (lower >= 0x67 && lower <= 0x7a) return 0;
    else if (isDigit(code)) digit = true;
    else if (code === PERCENT && step < 0 && n === 2) return 0;
    else if (code !== DASH) break;
  }
  return !letter ? 0 : digit ? 2 : 1;
}

/**
 * True when the digits text[start, end) are a piece of a hex token (a hash, a UUID) rather than a
 * number of their own: a side is glued to hex letters and digits (`…3a4532…`, `23253005-4391-4e65`),
 * or both sides to hex letters (`deadbeef4111…cafe`). A word on one side (`CC4111…`, `card4111…`,
 * `卡号4111…`) is not a token. `window` is the detector's: what a stream guard holds past a match's
 * start, so that the scan of a stream reads only what it has and decides as the whole text's.
 */
export function inHexToken(text: string, start: number, end: number, window: number): boolean {
  const before = hexPiece(text, start - 1, -1, -1);
  if (before === 2) return true;
  const after = hexPiece(text, end, 1, Math.min(text.length, start + window - 1));
  return after === 2 || (before === 1 && after === 1);
}

function groupEnd(text: string, from: number, runEnd: number): number {
  let end = from;
  while (end < runEnd && isDigit(text.charCodeAt(end))) end++;
  return end;
}

function isDigit(code: number): boolean {
  return code >= 48 && code <= 57;
}

function isJoiner(code: number): boolean {
  return code === SPACE || code === DASH;
}

const PLUS = 43;
const DASH = 45;
const DOT = 46;
const PERCENT = 37;
const SPACE = 32;

/** The end of the run of digit groups going on from `from` (a digit), and its digit count. */
function runFrom(text: string, from: number): { end: number; digits: number } {
  let end = from + 1;
  let digits = 1;
  for (;;) {
    const c = end < text.length ? text.charCodeAt(end) : -1;
    if (isDigit(c)) {
      end++;
      digits++;
    } else if (isJoiner(c) && end + 1 < text.length && isDigit(text.charCodeAt(end + 1))) {
      end += 2;
      digits++;
    } else {
      return { end, digits };
    }
  }
}

/**
 * Digits at `i` right after a number of up to 6 digits and a dot are a fraction (0.5533538169896861,
 * a latitude), not a card: a double has 17 digits at most. After a longer number the dot separates
 * two numbers.
 */
function isFraction(text: string, i: number): boolean {
  if (text.charCodeAt(i - 1) !== DOT) return false;
  let n = 0;
  while (n < 7 && isDigit(text.charCodeAt(i - 2 - n))) n++;
  return n >= 1 && n <= 6;
}

/**
 * A stream guard scans on from where it released text (`from`), which can be inside a run of digit
 * groups: its cut stops a window before the end, or at the start of a match. The scan of the whole
 * text walked that run's groups from the run's start, and since no card it found crosses the cut,
 * the walk reached the first group at or after `from`: the walk resumes there, so a stream finds
 * the cards the whole text does however long the run. Returns where the plain scan goes on.
 */
function resumeRun(text: string, from: number, out: Match[]): number {
  // The first group start at or after `from`, joined to a digit before it.
  let g = from;
  if (isDigit(text.charCodeAt(from - 1))) {
    while (isDigit(text.charCodeAt(g))) g++; // the rest of a group cut in two
    if (!isJoiner(text.charCodeAt(g)) || !isDigit(text.charCodeAt(g + 1))) return g;
    g++;
  } else if (!isJoiner(text.charCodeAt(from - 1)) || !isDigit(text.charCodeAt(from - 2)) || !isDigit(text.charCodeAt(from))) {
    return from; // not inside a run
  }
  // Groups glued on by a "+" (a phone number) or a fraction's dot, and the groups dashes join to
  // them, are no run: the plain scan skips them, and a run starts after the space that ends them.
  // Back over the dash-joined groups that end just before `g`: anything but "+" or a fraction's dot
  // before the first is a run, as far as the context tells.
  for (let k = g - 1; ; ) {
    let j = k - 1;
    while (j >= 0 && isDigit(text.charCodeAt(j))) j--;
    const c = j >= 0 ? text.charCodeAt(j) : -1;
    if (c === PLUS || isFraction(text, j + 1)) return text.charCodeAt(g - 1) === DASH ? from : g;
    if (!(c === DASH && j > 0 && isDigit(text.charCodeAt(j - 1)))) break;
    k = j;
  }
  const run = runFrom(text, g);
  // What the run holds from `g` on: a card needs 13 digits of it.
  let digits = 0;
  for (let i = g; i < run.end; i++) if (isDigit(text.charCodeAt(i))) digits++;
  if (digits >= MIN_DIGITS) cardsInGroups(text, -1, g, run.end, out);
  return run.end;
}

/**
 * Maximal runs of digit groups joined by single spaces or dashes, with at least 13 digits, that do
 * not continue a longer run (no digit, digit + dash, "+" — a phone number — or a fraction's dot
 * just before).
 */
export function findBankCards(original: string, from = 0): Match[] {
  const text = foldWidth(original);
  const out: Match[] = [];
  for (let i = from > 0 ? resumeRun(text, from, out) : from; i < text.length; i++) {
    if (!isDigit(text.charCodeAt(i))) continue;
    const before = i > 0 ? text.charCodeAt(i - 1) : -1;
    if (isDigit(before) || before === PLUS || (before === DASH && i > 1 && isDigit(text.charCodeAt(i - 2))) || isFraction(text, i)) {
      // Glued on: this group cannot start a run, but one may start after the next space.
      while (i + 1 < text.length && isDigit(text.charCodeAt(i + 1))) i++;
      continue;
    }
    const { end, digits } = runFrom(text, i);
    // A run too short holds no card; nor does any part of it that starts later.
    if (digits >= MIN_DIGITS) cardsInRun(text, i, end, digits, out);
    i = end - 1;
  }
  return out;
}

export const bankCardDetector: Detector = { name: 'bank-card', placeholder: '[BANK_CARD]', window: WINDOW, find: findBankCards };
