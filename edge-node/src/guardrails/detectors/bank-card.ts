// Payment card numbers: 13-19 digits, optionally grouped by single spaces or dashes, passing the
// Luhn check, starting with 2-6 (Mastercard 2-series, Amex/JCB/Diners 3, Visa 4, Mastercard 5,
// Discover/UnionPay 6) so that millisecond timestamps and order numbers starting 1 are left alone.
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
  const first = digits.charCodeAt(0) - 48;
  return digits.length >= MIN_DIGITS && digits.length <= MAX_DIGITS && first >= 2 && first <= 6 && luhnValid(digits);
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
  // Groups are walked in place: a run can hold millions of one-digit groups.
  for (let i = runStart; i < runEnd; ) {
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

const PLUS = 43;
const DASH = 45;
const SPACE = 32;

/**
 * Maximal runs of digit groups joined by single spaces or dashes, with at least 13 digits, that do
 * not continue a longer run (no digit, digit + dash, or "+" — a phone number — just before).
 */
export function findBankCards(original: string, from = 0): Match[] {
  const text = foldWidth(original);
  const out: Match[] = [];
  for (let i = from; i < text.length; i++) {
    if (!isDigit(text.charCodeAt(i))) continue;
    const before = i > 0 ? text.charCodeAt(i - 1) : -1;
    if (isDigit(before) || before === PLUS || (before === DASH && i > 1 && isDigit(text.charCodeAt(i - 2)))) {
      // Glued on: this group cannot start a run, but one may start after the next space.
      while (i + 1 < text.length && isDigit(text.charCodeAt(i + 1))) i++;
      continue;
    }
    let end = i + 1;
    let digits = 1;
    for (;;) {
      const c = end < text.length ? text.charCodeAt(end) : -1;
      if (isDigit(c)) {
        end++;
        digits++;
      } else if ((c === SPACE || c === DASH) && end + 1 < text.length && isDigit(text.charCodeAt(end + 1))) {
        end += 2;
        digits++;
      } else {
        break;
      }
    }
    // A run too short holds no card; nor does any part of it that starts later.
    if (digits >= MIN_DIGITS) cardsInRun(text, i, end, digits, out);
    i = end - 1;
  }
  return out;
}

// 19 digits and 18 separators, plus the neighbour that tells a run has ended.
export const bankCardDetector: Detector = { name: 'bank-card', placeholder: '[BANK_CARD]', window: 40, find: findBankCards };
