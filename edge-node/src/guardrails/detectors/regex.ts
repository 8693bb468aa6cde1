// A policy's own regular expression, compiled once. Flags: `g` and, when the pattern allows it,
// `u` (Unicode); a leading `(?i)` asks for case-insensitive matching (JavaScript has no inline flags).
import { regexMatches } from './detector.js';
import type { Detector, Match } from './detector.js';

/** How far back a stream guard looks for a policy regex, whose match length is unknown. */
export const REGEX_WINDOW = 256;

export type CompiledRegex = { ok: true; detector: Detector } | { ok: false; reason: string };

export function compileRegex(pattern: string | undefined): CompiledRegex {
  if (pattern === undefined || pattern.length === 0) return { ok: false, reason: 'the rule has no pattern' };
  let source = pattern;
  let flags = 'g';
  if (source.startsWith('(?i)')) {
    source = source.slice(4);
    flags += 'i';
  }
  let re: RegExp;
  try {
    re = new RegExp(source, `${flags}u`);
  } catch {
    try {
      // Patterns written for engines without Unicode mode (e.g. `\-` outside a class) still work.
      re = new RegExp(source, flags);
    } catch (err) {
      return { ok: false, reason: `the pattern does not compile (${(err as Error).message})` };
    }
  }
  const find = (text: string, from = 0): Match[] => regexMatches(re, text, from);
  return { ok: true, detector: { name: 'regex', placeholder: '[REDACTED]', window: REGEX_WINDOW, find } };
}
