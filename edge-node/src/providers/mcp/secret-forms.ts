/**
 * The forms an encoder may write the node's key for a tool server in: as written, with each
 * character other than a letter or digit JSON-escaped (`\"`, `\\`, `\/`, `\u0026` or `\u003C`, mixed
 * as any encoder mixes them) or HTML-escaped (`&amp;`, `&#38;`, `&#x26;`, HTML5's names: `&sol;`,
 * `&period;`; also with the escape's & JSON-escaped, `\u0026#43;`), as one pattern over a latin1
 * view of the bytes (one character per byte: the key's UTF-8 and each escape are matched without
 * decoding the body).
 */
import { builtPerKey } from './built-per-key.js';
import { HTML_NAMED_REFERENCES } from './secret-escapes.js';

/** By character: the HTML5 names that write it. */
const HTML_NAMES = new Map<string, string[]>();
for (const [name, code] of HTML_NAMED_REFERENCES) {
  const char = String.fromCharCode(code);
  HTML_NAMES.set(char, [...(HTML_NAMES.get(char) ?? []), name]);
}

/** A pattern matching `secret` (or a part of it) in every form, global. */
export function secretForms(secret: string): RegExp {
  let source = '';
  for (const char of secret) {
    if (/^[A-Za-z0-9]$/.test(char)) {
      source += char;
      continue;
    }
    source += `(?:${[escapeRegExp(Buffer.from(char, 'utf8').toString('latin1')), ...escapedForms(char)].join('|')})`;
  }
  return new RegExp(source, 'g');
}

/** secretForms(secret), built on its first use (a long key's pattern takes milliseconds to build). */
export const secretFormsOf: (secret: string) => RegExp = builtPerKey(secretForms);

/**
 * Patterns matching any JSON escape (`\\…`) and any HTML escape (`&…;`) of a character of `secret`
 * other than a letter or digit (its forms but the one as written); undefined when it has none, so
 * every form of it is as written.
 */
export function escapesOfSecret(secret: string): { json: RegExp; html: RegExp } | undefined {
  const others = new Set([...secret].filter((char) => !/^[A-Za-z0-9]$/.test(char)));
  if (others.size === 0) return undefined;
  const forms = [...others].flatMap(escapedForms);
  return {
    // Every form but an HTML escape's starts with a backslash (some inside a group).
    json: new RegExp(forms.filter((form) => !form.startsWith('&')).join('|')),
    html: new RegExp(forms.filter((form) => form.startsWith('&')).join('|')),
  };
}

/**
 * Patterns of the escapes an encoder may write `char` as (a character other than a letter or digit),
 * its JSON escapes also as a JSON text carried in a JSON string writes them: the escape's backslash
 * escaped (`\\\\` or `\\u005C`), then what followed it as written or escaped too (`\\\\u0026`,
 * `\\\\\\"`, PHP's `\\\\\\/`, `\\u005C\\u0022`).
 */
function escapedForms(char: string): string[] {
  // What follows the backslash of each short JSON escape of `char` (`"`, `\`, `/`, `n`…).
  const after: string[] = [];
  const escaped = JSON.stringify(char).slice(1, -1);
  if (escaped.startsWith('\\') && !escaped.startsWith('\\u')) after.push(escaped.slice(1));
  if (char === '/') after.push('/');
  const forms: string[] = [];
  // An escaped backslash: the first half of every JSON escape escaped once more.
  const backslashEscaped = `(?:${escapeRegExp('\\\\')}|${escapeRegExp('\\')}u005[cC])`;
  for (const x of after) {
    forms.push(escapeRegExp(`\\${x}`));
    // The character after the escaped backslash, as written or (one JSON escapes) escaped in turn.
    const second = [escapeRegExp(x)];
    if (x === '"' || x === '\\' || x === '/') second.push(escapeRegExp(`\\${x}`), `${escapeRegExp('\\')}u${eitherCaseHex(x.charCodeAt(0), 4)}`);
    forms.push(`${backslashEscaped}(?:${second.join('|')})`);
  }
  const units = (backslash: string): string => {
    let source = '';
    for (let i = 0; i < char.length; i += 1) source += `${backslash}u${eitherCaseHex(char.charCodeAt(i), 4)}`;
    return source;
  };
  forms.push(units(escapeRegExp('\\')), units(backslashEscaped));
  const code = char.codePointAt(0)!;
  // After the & (written as it is, JSON-escaped, or JSON-escaped twice).
  const html = [`#0*${code};`, `#[xX]0*${eitherCaseHex(code, 1)};`, ...(HTML_NAMES.get(char) ?? []).map((name) => `${name};`)];
  for (const amp of ['&', escapeRegExp('\\u0026'), escapeRegExp('\\\\u0026')]) forms.push(...html.map((rest) => `${amp}${rest}`));
  return forms;
}

/** `n` in hex, at least `digits` long, each letter matching either case. */
function eitherCaseHex(n: number, digits: number): string {
  return n.toString(16).padStart(digits, '0').replace(/[a-f]/g, (d) => `[${d}${d.toUpperCase()}]`);
}

function escapeRegExp(text: string): string {
  return text.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&');
}

