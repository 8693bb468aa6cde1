// PRC resident identity numbers (GB 11643-1999): 17 digits + a check character (0-9 or X) from
// ISO 7064 MOD 11-2, with a plausible birth date (YYYYMMDD, 1900-2099, a real calendar day).
// Written plain or grouped 6 8 4 with single spaces or dashes.
import { regexMatches } from './detector.js';
import type { Detector, Match } from './detector.js';
import { foldWidth } from './fold-width.js';

// Not part of a longer digit run: no digit (or digit + dash) on either side.
const CANDIDATE = /(?<!\d)(?<!\d-)[1-9]\d{5}[ -]?(?:19|20)\d{6}[ -]?\d{3}[\dXx](?!\d)(?!-\d)/g;
const WEIGHTS = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
const CHECK = '10X98765432';

/** True when the 18 characters (no spaces) carry a valid MOD 11-2 check character. */
export function prcIdChecksumValid(id: string): boolean {
  if (!/^\d{17}[\dXx]$/.test(id)) return false;
  let sum = 0;
  for (let i = 0; i < 17; i++) sum += (id.charCodeAt(i) - 48) * WEIGHTS[i]!;
  return CHECK[sum % 11] === id[17]!.toUpperCase();
}

function plausibleBirthDate(yyyymmdd: string): boolean {
  const year = Number(yyyymmdd.slice(0, 4));
  const month = Number(yyyymmdd.slice(4, 6));
  const day = Number(yyyymmdd.slice(6, 8));
  if (year < 1900 || year > 2099 || month < 1 || month > 12 || day < 1) return false;
  const date = new Date(Date.UTC(year, month - 1, day));
  return date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
}

export function findPrcResidentIds(original: string, from = 0): Match[] {
  const text = foldWidth(original);
  return regexMatches(CANDIDATE, text, from, (m) => {
    const id = m[0].replace(/[ -]/g, '');
    if (id.length !== 18 || !plausibleBirthDate(id.slice(6, 14)) || !prcIdChecksumValid(id)) return null;
    return { start: m.index, end: m.index + m[0].length };
  });
}

export const prcResidentIdDetector: Detector = { name: 'prc-resident-id', placeholder: '[PRC_ID]', window: 24, find: findPrcResidentIds };
