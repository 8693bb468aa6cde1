// Phone numbers: mainland China mobiles (1[3-9] + 9 digits, optional +86 / 0086, spaces or dashes
// in the usual 3-4-4 grouping, or dots in both places) and international E.164 numbers written
// with a leading "+" (single spaces or dashes, or dots between groups of up to 4 digits).
import { inHexToken } from './bank-card.js';
import { regexMatches } from './detector.js';
import type { Detector, Match } from './detector.js';
import { foldWidth } from './fold-width.js';

// The longest + number and the neighbour that ends it; what is glued after a number is read only
// this far from its start (inHexToken), so a stream's scan decides as the whole text's.
const WINDOW = 32;

// No form may continue a longer digit run: no digit (or digit + dash) before, no digit (or dash +
// digit) after. A space is a word separator in prose, so it does not join runs here. No form starts
// after a number of up to 6 digits and a dot either: those digits are a fraction (a score or a
// coordinate written with 11 decimals, 0.14680662540; a double has 17 digits at most). After a
// longer number the dot is a separator (13812345678.13912345678), and a dot after a number is
// ignored, so one exported as a float (13812345678.0) is still found. The dotted forms refuse a
// digit + dot before them and a dot + digit after them, so IPs, versions and dotted runs
// (10.0.0.138, 138.1234.5678.9) are not phones, and the dots must group the whole number
// (138.1234.5678, not 138.12345678: one dot reads as a decimal).
const PLAIN_BEFORE = '(?<![\\d+])(?<!\\d-)(?<!(?<!\\d)\\d{1,6}\\.)';
const PLAIN_AFTER = '(?!-?\\d)';
const DOTTED_BEFORE = '(?<![\\d+])(?<!\\d[-.])';
const DOTTED_AFTER = '(?![-.]?\\d)';
// One exception to the fraction rule: a numbered list written without a space (`1.13812345678`, as
// Chinese input often does). At the very start of a line (no indentation), after a number of 1 to 3
// digits that does not start with 0, a whole mainland mobile that nothing numeric follows (no
// digit, no dot or dash and a digit, no ASCII comma and a number) is a list item's number. Scores
// are `0.…`, values in JSON follow a key or sit indented in an array, a computed double prints 15
// to 17 digits, and a CSV row goes on with a comma, so fractions in JSON and tables do not take
// this shape. A decimal alone on its line still can (`3.14159265358`), and only the plain form is
// ambiguous (a decimal has no spaces, dashes or +86), so that form counts as an item when the list
// number is 1 (a list's first item), when its line goes on with text after blanks
// (`2.13912345678 张三`, `2.13912345678    张三`), when the nearest item line before it (past blank
// and continuation lines) is numbered one less, or when the line before it is a heading ending in a
// colon and the number is 2 (`以下号码：` then `2.13912345678`: an excerpt from item 2; isListItem);
// else it is a decimal. A number with exactly these 11 decimals that one of those makes an item is
// still masked (`1.14159265358`, `47.18860501045 N`, `e:` then `2.13…`: a known limit). Cards are
// not read this way: printed
// doubles (`1.4532015112830366`, one per line) would be cards one time in 25.
const LIST_ITEM_BEFORE = '(?<=(?<![^\\n\\r])[1-9]\\d{0,2}\\.)';
const LIST_ITEM_AFTER = '(?![-.]?\\d)';
// After a list item's number: a row of numbers goes on (`47.18860501045,8.52`; a full-width comma,
// which folds to this one, is prose).
const NUMBER_ROW_GOES_ON = /^,\s*-?\d/;
const PHONE = new RegExp(
  [
    // Mainland mobiles, optional +86 / 0086 / (+86), spaces or dashes in the 3-4-4 grouping.
    `${PLAIN_BEFORE}(?:(?:\\+|00)86[ -]?|\\(\\+86\\) ?)?1[3-9]\\d[ -]?\\d{4}[ -]?\\d{4}${PLAIN_AFTER}`,
    // A numbered list item's mobile, its number glued to it by the dot (see LIST_ITEM_BEFORE).
    `${LIST_ITEM_BEFORE}()(?:\\+86[ -]?)?1[3-9]\\d[ -]?\\d{4}[ -]?\\d{4}${LIST_ITEM_AFTER}`,
    // The same with dots in both places (138.1234.5678, +86.139.1234.5678).
    `${DOTTED_BEFORE}(?:(?:\\+|00)86[ .-]?)?1[3-9]\\d\\.\\d{4}\\.\\d{4}${DOTTED_AFTER}`,
    // E.164: +, a country code, then digits with single spaces/dashes and an optional (area) group.
    `${PLAIN_BEFORE}\\+[1-9](?:[ -]?(?:\\(\\d{1,4}\\)|\\d)){6,20}${PLAIN_AFTER}`,
    // E.164 with dots: +, a country code of up to 3 digits, then 2 to 8 dot-led groups of 1-4 digits
    // (+1.415.555.2671); see dottedGroupsLookLikeAPhone.
    `${DOTTED_BEFORE}\\+[1-9]\\d{0,2}(?:\\.\\d{1,4}){2,8}${DOTTED_AFTER}`,
  ].join('|'),
  'g',
);
const E164_MIN_DIGITS = 8;
const E164_MAX_DIGITS = 15;
const COMMA = 44;

function isDigit(code: number): boolean {
  return code >= 48 && code <= 57;
}

function digitCount(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 48 && c <= 57) n++;
  }
  return n;
}

/** A dotted + number needs two groups of 2 or more digits after its country code: +1.2.3.4.5.6.7.8.9 is a version. */
function dottedGroupsLookLikeAPhone(s: string): boolean {
  let longGroups = 0;
  for (const group of s.split('.').slice(1)) if (group.length >= 2) longGroups++;
  return longGroups >= 2;
}

/** A mobile in the list form that a decimal's fraction could also be: 11 digits, no +86, no separator. */
const PLAIN_MOBILE = /^1[3-9]\d{9}$/;
/**
 * Text after the digits on their line: a blank run (a column aligned with spaces or a tab), then
 * anything but a line break or a full stop. Read no further than GOES_ON_CHARS past the digits: a
 * stream guard holds back the phone window (32) from where a number starts, so a stream that
 * releases a number's first digit has these characters after its last one, and decides as the
 * whole text does.
 */
const LINE_GOES_ON = /^[ \t]{0,20}[^\s.]/;
const GOES_ON_CHARS = 21;
/**
 * A list item's line: its list number and a dot, then no digit (`2.张三`, `3.+86 …`, `4. text`) or
 * a mobile's first digits (`2.139…`); not a decimal (`2.5`).
 */
const LIST_ITEM_LINE = /^([1-9]\d{0,2})\.(?:[^\d]|1[3-9])/;
/** A list's heading: a line ending in a colon (a full-width one folds to `:`). */
const LIST_HEADING = /[:：][ \t]*$/;
/**
 * How far back from an item's list number earlier lines are read: blank lines (CRLF ones too),
 * continuation lines of the item before (`1.张三\n  备注：值班\n2.139…`), and the line that decides.
 * With the number itself (3 digits and a dot) this stays within the 64 characters a stream guard
 * keeps before what it scans (text-guard.ts, CONTEXT_CHARS), so a stream decides as the whole text
 * does; a line that starts further back is not read, in both (a line before of 47 characters and
 * its line break, as far as the look-back went before it read more than one line).
 */
const LOOK_BACK_CHARS = 51;
const LOOK_BACK_LINES = 4;

/**
 * Whether the plain mobile at [start, end) of `text` (folded), glued to a list number at the start
 * of its line, is a list item rather than a decimal's fraction (see LIST_ITEM_BEFORE): the number
 * is 1, its line goes on with text, the nearest item line before it (past blank and continuation
 * lines, LOOK_BACK_LINES at most) is numbered one less, or the number is 2 and the first line
 * before it is a heading ending in a colon (`以下号码：\n2.139…`, a list excerpt from item 2).
 */
function isListItem(text: string, start: number, end: number): boolean {
  let numberStart = start - 1;
  while (numberStart > 0 && isDigit(text.charCodeAt(numberStart - 1))) numberStart--;
  const number = Number(text.slice(numberStart, start - 1));
  if (number === 1) return true;
  if (LINE_GOES_ON.test(text.slice(end, end + GOES_ON_CHARS))) return true;
  const limit = Math.max(0, numberStart - LOOK_BACK_CHARS);
  let at = numberStart;
  for (let lines = 0; lines < LOOK_BACK_LINES; lines++) {
    while (at > limit && isLineBreak(text.charCodeAt(at - 1))) at--;
    if (at <= limit) return false;
    const lineEnd = at;
    while (at > limit && !isLineBreak(text.charCodeAt(at - 1))) at--;
    // A line that starts before the limit is not read (a stream may not have it).
    if (at > 0 && !isLineBreak(text.charCodeAt(at - 1))) return false;
    const line = text.slice(at, lineEnd);
    // The nearest item decides: numbered one less (a column of decimals, `3.14159265358` twice, is no list).
    const item = LIST_ITEM_LINE.exec(line);
    if (item !== null) return Number(item[1]) === number - 1;
    // A heading makes an excerpt's first item of number 2 one (item 1 left out); a decimal after a
    // heading (`Values:` then `3.14159265358`) is no item.
    if (lines === 0 && number === 2 && LIST_HEADING.test(line)) return true;
  }
  return false;
}

function isLineBreak(code: number): boolean {
  return code === 10 || code === 13;
}

/**
 * The length of the longest head of a space-grouped + number `s` that ends at a space and has at
 * most E164_MAX_DIGITS digits (at least E164_MIN_DIGITS), else -1. The pattern takes every group
 * that follows, but a space does not join runs: in `+44 20 7946 0958 2024 01 15` the number is
 * followed by a date, and the whole, 20 digits, is no phone; its head is.
 */
function e164Head(s: string): number {
  let end = s.length;
  let digits = digitCount(s);
  while (digits > E164_MAX_DIGITS) {
    const space = s.lastIndexOf(' ', end - 1);
    if (space <= 0) return -1;
    digits -= digitCount(s.slice(space, end));
    end = space;
  }
  return digits >= E164_MIN_DIGITS ? end : -1;
}

export function findPhones(original: string, from = 0): Match[] {
  const text = foldWidth(original);
  return regexMatches(PHONE, text, from, (m) => {
    const s = m[0];
    let end = s.length;
    // Digits glued to a hash or UUID are a piece of it (bcf025c1-e156-4443-8409-…); a number
    // written with its "+" or "(+86)" is one whatever is glued to it.
    if (isDigit(s.charCodeAt(0)) && inHexToken(text, m.index, m.index + end, WINDOW)) return null;
    if (m[1] !== undefined) {
      // A list item's number (the empty group marks that form) followed by more numbers is a row of them.
      if (original.charCodeAt(m.index + end) === COMMA && NUMBER_ROW_GOES_ON.test(text.slice(m.index + end, m.index + end + WINDOW))) return null;
      if (PLAIN_MOBILE.test(s) && !isListItem(text, m.index, m.index + end)) return null;
    }
    if (s.startsWith('+') && !/^\+86[ .-]?1[3-9]/.test(s)) {
      if (s.includes('.')) {
        const digits = digitCount(s);
        if (digits < E164_MIN_DIGITS || digits > E164_MAX_DIGITS || !dottedGroupsLookLikeAPhone(s)) return null;
      } else {
        end = e164Head(s);
        if (end < 0) return null;
        // The groups left off are scanned again (a mobile number may be among them).
        PHONE.lastIndex = m.index + end;
      }
    }
    return { start: m.index, end: m.index + end };
  });
}

export const phoneDetector: Detector = { name: 'phone', placeholder: '[PHONE]', window: WINDOW, find: findPhones };
