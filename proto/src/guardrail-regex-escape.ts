/**
 * One backslash escape of a regex, read as the engine reads it under the pattern's flags. Shared
 * by the two guardrail regex checks (guardrail-regex-risk.ts, guardrail-regex-runs.ts), which
 * must agree with the engine and each other on where an escape ends: a misread escape hides what
 * follows it from a check.
 */

export interface RegexEscape {
  /** Index just past the escape. */
  end: number;
  /** `\b`, `\B`: zero width. A back-reference matches any text a group did. Else one character. */
  kind: 'char' | 'assertion' | 'backreference';
  /** The character, when the escape stands for exactly one (else a class, compared by the engine). */
  literal: string | undefined;
}

const SINGLE_ESCAPES: Readonly<Record<string, string>> = { n: '\n', r: '\r', t: '\t', f: '\f', v: '\v' };

/**
 * Reads the escape whose backslash is at `i`. `unicode`: the pattern is compiled with `u`.
 * `namedReferences`: `\k<name>` is a back-reference (under `u`, or in a pattern that names a group);
 * otherwise it is the text `k<`.
 */
export function readEscape(source: string, i: number, unicode: boolean, namedReferences: boolean): RegexEscape {
  const e = source[i + 1] ?? '';
  let at = i + 2;
  if (e === 'b' || e === 'B') return { end: at, kind: 'assertion', literal: undefined };
  if (e === 'k' && source[at] === '<' && namedReferences) {
    return { end: Math.max(at, source.indexOf('>', at) + 1 || source.length), kind: 'backreference', literal: undefined };
  }
  if (/[1-9]/.test(e)) {
    while (/\d/.test(source[at] ?? '')) at++;
    return { end: at, kind: 'backreference', literal: undefined };
  }
  if (unicode && (e === 'p' || e === 'P') && source[at] === '{') {
    return { end: Math.max(at, source.indexOf('}', at) + 1 || source.length), kind: 'char', literal: undefined };
  }
  if (unicode && e === 'u' && source[at] === '{') {
    const close = source.indexOf('}', at);
    const code = parseInt(source.slice(at + 1, close), 16);
    return { end: close < 0 ? source.length : close + 1, kind: 'char', literal: Number.isInteger(code) && code <= 0x10ffff ? String.fromCodePoint(code) : undefined };
  }
  const hex = e === 'x' ? 2 : e === 'u' ? 4 : 0;
  const digits = source.slice(at, at + hex);
  if (hex > 0 && digits.length === hex && /^[0-9a-fA-F]+$/.test(digits)) {
    at += hex;
    const code = parseInt(digits, 16);
    // Under `u`, `\uD83D\uDE00` is one character.
    const low = /^\\u([dD][c-fC-F][0-9a-fA-F]{2})/.exec(source.slice(at, at + 6));
    if (unicode && e === 'u' && code >= 0xd800 && code <= 0xdbff && low !== null) {
      return { end: at + 6, kind: 'char', literal: String.fromCharCode(code, parseInt(low[1]!, 16)) };
    }
    return { end: at, kind: 'char', literal: String.fromCharCode(code) };
  }
  if (e === 'c') {
    if (/[a-zA-Z]/.test(source[at] ?? '')) return { end: at + 1, kind: 'char', literal: String.fromCharCode(source.charCodeAt(at) % 32) };
    // Without `u`, `\c` before anything but a letter is a backslash; the `c` is read next.
    return { end: i + 1, kind: 'char', literal: '\\' };
  }
  if (e === '0') {
    if (unicode) return { end: at, kind: 'char', literal: '\0' };
    // A legacy octal escape: `\01` is one character.
    const start = at;
    while (at - start < 2 && /[0-7]/.test(source[at] ?? '')) at++;
    return { end: at, kind: 'char', literal: String.fromCharCode(parseInt(source.slice(i + 1, at), 8)) };
  }
  if (e in SINGLE_ESCAPES) return { end: at, kind: 'char', literal: SINGLE_ESCAPES[e] };
  // \d \w \s and their negations (classes), other letters (identity escapes without `u`).
  if (/[a-zA-Z0-9]/.test(e)) return { end: at, kind: 'char', literal: undefined };
  // Anything else stands for itself (`\.`, `\-`), astral characters included.
  const ch = e === '' ? '' : String.fromCodePoint(source.codePointAt(i + 1)!);
  return { end: i + 1 + ch.length, kind: 'char', literal: ch === '' ? undefined : ch };
}
