// A policy's own regular expression, compiled once. Flags: `g` and, when the pattern allows it,
// `u` (Unicode); a leading `(?i)` asks for case-insensitive matching (JavaScript has no inline flags).
import { regexMatches } from './detector.js';
import type { Detector, Match } from './detector.js';
import { regexBacktrackingRisk } from '../../../../proto/src/index.js';

/** How far back a stream guard looks for a policy regex, whose match length is unknown. */
export const REGEX_WINDOW = 256;

/**
 * Long texts are scanned in windows of this many characters (each starting where the last one's
 * matches may still begin, REGEX_WINDOW before its end), so the work of one try of the pattern is
 * bounded by the window, not the text: a pattern such as `.*x` or `\w+@`, quadratic in the length
 * of a run it fails on, then costs at most linear time times the window.
 */
const SCAN_WINDOW = 1024;
/** Text before a window the pattern sees (lookbehinds, `\b`). */
const WINDOW_CONTEXT = 64;

function windowedMatches(re: RegExp, text: string, from: number): Match[] {
  const out: Match[] = [];
  for (let at = from; at < text.length; ) {
    const sliceStart = Math.max(0, at - WINDOW_CONTEXT);
    const end = Math.min(text.length, at + SCAN_WINDOW);
    const last = end === text.length;
    // Matches starting from here on are left to the next window, which sees REGEX_WINDOW past them.
    const limit = last ? end : end - REGEX_WINDOW;
    const slice = text.slice(sliceStart, end);
    let next = limit;
    re.lastIndex = at - sliceStart;
    for (let m = re.exec(slice); m !== null; m = re.exec(slice)) {
      const start = sliceStart + m.index;
      if (start >= limit) break;
      if (m[0].length === 0) {
        re.lastIndex = m.index + 1;
        continue;
      }
      const matchEnd = start + m[0].length;
      if (!last && matchEnd === end && start > at) {
        // It runs to the window's edge, so it may go on: the next window starts with it.
        next = start;
        break;
      }
      // (A match as long as a whole window is masked up to the window's edge.)
      out.push({ start, end: matchEnd });
      next = Math.max(next, matchEnd);
    }
    if (last) break;
    at = next;
  }
  return out;
}

export type CompiledRegex = { ok: true; detector: Detector } | { ok: false; reason: string };

export function compileRegex(pattern: string | undefined): CompiledRegex {
  if (pattern === undefined || pattern.length === 0) return { ok: false, reason: 'the rule has no pattern' };
  let source = pattern;
  let flags = 'g';
  if (source.startsWith('(?i)')) {
    source = source.slice(4);
    flags += 'i';
  }
  // `(?i)` alone would compile to an empty regex, whose empty matches are skipped: it would never fire.
  if (source.length === 0) return { ok: false, reason: 'the rule has no pattern' };
  const risk = regexBacktrackingRisk(source, { ignoreCase: flags.includes('i') });
  if (risk !== null) return { ok: false, reason: `the pattern is refused: ${risk}` };
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
  const find = (text: string, from = 0): Match[] => (text.length - from <= SCAN_WINDOW ? regexMatches(re, text, from) : windowedMatches(re, text, from));
  return { ok: true, detector: { name: 'regex', placeholder: '[REDACTED]', window: REGEX_WINDOW, find } };
}
