// Phone numbers: mainland China mobiles (1[3-9] + 9 digits, optional +86 / 0086, spaces or dashes
// in the usual 3-4-4 grouping) and international E.164 numbers written with a leading "+".
import { regexMatches } from './detector.js';
import type { Detector, Match } from './detector.js';
import { foldWidth } from './fold-width.js';

// Neither form may continue a longer digit run: no digit (or digit + dash) before, no digit (or
// dash + digit) after. A space is a word separator in prose, so it does not join runs here.
const PHONE = new RegExp(
  [
    '(?<![\\d+])(?<!\\d-)',
    '(?:',
    '(?:(?:\\+|00)86[ -]?|\\(\\+86\\) ?)?1[3-9]\\d[ -]?\\d{4}[ -]?\\d{4}',
    '|',
    // E.164: +, a country code, then digits with single spaces/dashes and an optional (area) group.
    '\\+[1-9](?:[ -]?(?:\\(\\d{1,4}\\)|\\d)){6,20}',
    ')',
    '(?!-?\\d)',
  ].join(''),
  'g',
);
const E164_MIN_DIGITS = 8;
const E164_MAX_DIGITS = 15;

function digitCount(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 48 && c <= 57) n++;
  }
  return n;
}

export function findPhones(original: string, from = 0): Match[] {
  const text = foldWidth(original);
  return regexMatches(PHONE, text, from, (m) => {
    const s = m[0];
    if (s.startsWith('+') && !/^\+86[ -]?1[3-9]/.test(s)) {
      const digits = digitCount(s);
      if (digits < E164_MIN_DIGITS || digits > E164_MAX_DIGITS) return null;
    }
    return { start: m.index, end: m.index + s.length };
  });
}

export const phoneDetector: Detector = { name: 'phone', placeholder: '[PHONE]', window: 32, find: findPhones };
