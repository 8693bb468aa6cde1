// Payment card numbers: 13-19 digits, optionally grouped by single spaces or dashes, passing the
// Luhn check, starting with 2-6 (Mastercard 2-series, Amex/JCB/Diners 3, Visa 4, Mastercard 5,
// Discover/UnionPay 6) so that millisecond timestamps and order numbers starting 1 are left alone.
import { regexMatches } from './detector.js';
import type { Detector, Match } from './detector.js';

// A maximal run of digit groups joined by single separators, with at least 13 digits, not glued to
// a longer run; a "+" before marks a phone number. (Greedy, so the run always ends at its end.)
const RUN = /(?<![\d+])(?<!\d-)\d(?:[ -]?\d){12,}/g;
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
function cardsInRun(run: string, offset: number): Match[] {
  const groups: Array<{ start: number; end: number }> = [];
  const re = /\d+/g;
  for (let g = re.exec(run); g !== null; g = re.exec(run)) groups.push({ start: g.index, end: g.index + g[0].length });
  const whole = run.replace(/[ -]/g, '');
  if (whole.length <= MAX_DIGITS && isCard(whole)) return [{ start: offset, end: offset + run.length }];
  if (groups.length < 2) return [];
  const out: Match[] = [];
  for (let i = 0; i < groups.length; i++) {
    // Grow the candidate group by group; stop past 19 digits or after a group too short to be inner.
    let digits = '';
    let best = -1;
    for (let j = i; j < groups.length; j++) {
      const g = groups[j]!;
      digits += run.slice(g.start, g.end);
      if (digits.length > MAX_DIGITS) break;
      if (j > i && isCard(digits)) best = j;
      if (g.end - g.start < 4) break;
    }
    if (best >= 0) {
      out.push({ start: offset + groups[i]!.start, end: offset + groups[best]!.end });
      i = best;
    }
  }
  return out;
}

export function findBankCards(text: string, from = 0): Match[] {
  const out: Match[] = [];
  for (const run of regexMatches(RUN, text, from)) {
    out.push(...cardsInRun(text.slice(run.start, run.end), run.start));
  }
  return out;
}

// 19 digits and 18 separators, plus the neighbour that tells a run has ended.
export const bankCardDetector: Detector = { name: 'bank-card', placeholder: '[BANK_CARD]', window: 40, find: findBankCards };
