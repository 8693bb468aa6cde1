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
 * by a space), the longest card made of whole consecutive groups, leftmost first, where every
 * group but the last has at least 4 digits (4-4-4-4, 4-6-5, 4-4-4-4-3 are how cards are written).
 */
function cardsInRun(text: string, runStart: number, runEnd: number, digitCount: number, out: Match[]): void {
  if (digitCount <= MAX_DIGITS && isCard(text.slice(runStart, runEnd).replace(/[ -]/g, ''))) {
    out.push({ start: runStart, end: runEnd });
    return;
  }
  cardsInGroups(text, runStart, runStart, runEnd, out);
}

/** The group walk of `cardsInRun` from the group starting at `walkFrom` (`runStart`: -1 when before it, unknown). */
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
        if ((j > i || apart) && isCard(digits)) best = jEnd;
        if (jEnd - j < 4 || jEnd >= runEnd) break;
        j = jEnd + 1; // past the single separator
        jEnd = groupEnd(text, j, runEnd);
      }
      if (best >= 0) {
        out.push({ start: i, end: best });
        i = best + 1;
        continue;
      }
    }
    i = iEnd + 1;
  }
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
  // Groups glued on by a "+" (a phone number) and dashes are no run: the plain scan skips them.
  // Back over the dash-joined groups before `g`: a space, or anything but "+" before the first, is a run.
  for (let k = g - 1; text.charCodeAt(k) === DASH; ) {
    let j = k - 1;
    while (j >= 0 && isDigit(text.charCodeAt(j))) j--;
    if (j >= 0 && text.charCodeAt(j) === PLUS) return from;
    if (!(j > 0 && isDigit(text.charCodeAt(j - 1)))) break;
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
 * not continue a longer run (no digit, digit + dash, or "+" — a phone number — just before).
 */
export function findBankCards(original: string, from = 0): Match[] {
  const text = foldWidth(original);
  const out: Match[] = [];
  for (let i = from > 0 ? resumeRun(text, from, out) : from; i < text.length; i++) {
    if (!isDigit(text.charCodeAt(i))) continue;
    const before = i > 0 ? text.charCodeAt(i - 1) : -1;
    if (isDigit(before) || before === PLUS || (before === DASH && i > 1 && isDigit(text.charCodeAt(i - 2)))) {
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

// 19 digits and 18 separators, plus the neighbour that tells a run has ended: a card of a longer
// run is found once this much follows its start (the walk resumes inside the run, see resumeRun).
export const bankCardDetector: Detector = { name: 'bank-card', placeholder: '[BANK_CARD]', window: 40, find: findBankCards };
