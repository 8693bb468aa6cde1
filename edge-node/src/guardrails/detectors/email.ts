// E-mail addresses: local@domain.tld with ASCII local parts and domains (RFC 5321 lengths).
import { regexMatches } from './detector.js';
import type { Detector, Match } from './detector.js';
import { foldWidth } from './fold-width.js';

// The lookbehind starts a match only at the start of a run of local-part characters, so the scan
// stays linear on long runs without an "@" and never starts mid-address.
// The top-level label is letters, or the ASCII (punycode) form of an internationalised one
// (`xn--p1ai` for .рф).
const EMAIL = /(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+(?:[A-Za-z]{2,63}|[Xx][Nn]--[A-Za-z0-9-]{1,59})(?![A-Za-z0-9-])/g;
const MAX_LENGTH = 254;

export function findEmails(original: string, from = 0): Match[] {
  const text = foldWidth(original);
  // Most text has no "@": skip the regex scan entirely then.
  if (text.indexOf('@', from) === -1) return [];
  return regexMatches(EMAIL, text, from, (m) => {
    const local = m[0].slice(0, m[0].indexOf('@'));
    // A local part cannot start or end with a dot; an address is at most 254 characters.
    if (local.startsWith('.') || local.endsWith('.') || m[0].length > MAX_LENGTH) return null;
    return { start: m.index, end: m.index + m[0].length };
  });
}

export const emailDetector: Detector = { name: 'email', placeholder: '[EMAIL]', window: MAX_LENGTH, find: findEmails };
