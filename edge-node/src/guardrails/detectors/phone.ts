// Phone numbers: mainland China mobiles (1[3-9] + 9 digits, optional +86 / 0086, spaces or dashes
// in the usual 3-4-4 grouping, or dots in both places) and international E.164 numbers written
// with a leading "+" (single spaces or dashes, or dots between groups of up to 4 digits).
import { regexMatches } from './detector.js';
import type { Detector, Match } from './detector.js';
import { foldWidth } from './fold-width.js';

// Neither form may continue a longer digit run: no digit (or digit + dash or dot) before, no digit
// (or dash or dot + digit) after, so IPs, version numbers and decimals (10.0.0.138,
// 138.1234.5678.9, 13812345678.5) are not phones. A space is a word separator in prose, so it does
// not join runs here. Dots must group the whole number (138.1234.5678, not 138.12345678): with one
// dot it reads as a decimal.
const PHONE = new RegExp(
  [
    '(?<![\\d+])(?<!\\d[-.])',
    '(?:',
    '(?:(?:\\+|00)86[ .-]?|\\(\\+86\\) ?)?1[3-9]\\d(?:[ -]?\\d{4}[ -]?\\d{4}|\\.\\d{4}\\.\\d{4})',
    '|',
    // E.164: +, a country code, then digits with single spaces/dashes and an optional (area) group.
    '\\+[1-9](?:[ -]?(?:\\(\\d{1,4}\\)|\\d)){6,20}',
    '|',
    // E.164 with dots: +, a country code, then at least two dot-led groups of 1-4 digits (+1.415.555.2671).
    '\\+[1-9]\\d{0,3}(?:\\.\\d{1,4}){2,8}',
    ')',
    '(?![-.]?\\d)',
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
    if (s.startsWith('+') && !/^\+86[ .-]?1[3-9]/.test(s)) {
      const digits = digitCount(s);
      if (digits < E164_MIN_DIGITS || digits > E164_MAX_DIGITS) return null;
    }
    return { start: m.index, end: m.index + s.length };
  });
}

export const phoneDetector: Detector = { name: 'phone', placeholder: '[PHONE]', window: 32, find: findPhones };
