/**
 * Whether a guardrail regex can match any character at all. Nodes skip empty matches (an empty
 * match has nothing to mask or report), so a pattern made only of anchors, `\b` and lookarounds
 * (`(?=.*confidential)`, `^$`, `\b`, `(?:)`, `x{0}`) gives a rule that never fires: a `block` rule
 * that blocks nothing, silently. The admin API refuses those with a hint instead.
 *
 * Read structurally over the `u`-flag grammar (the API only takes patterns valid under `u`): an
 * item consumes text unless it is an assertion, a lookaround group, or quantified to at most zero
 * times; a group consumes when one of its alternatives does. A back-reference counts as consuming
 * (what it repeats is not worked out), so the check only refuses patterns that surely match nothing.
 */
import { readEscape } from '../../../proto/src/index.js';

/** `{n}`, `{n,}` or `{n,m}` at lastIndex. */
const COUNTED = /\{(\d+)(?:,(\d*))?\}/y;

interface Group {
  lookaround: boolean;
  /** Some item read so far (in any of its alternatives) can consume a character. */
  consumes: boolean;
}

/** True when `source` (without the `(?i)` prefix, valid under the `u` flag) can match at least one character. */
export function regexCanMatchText(source: string): boolean {
  const groups: Group[] = [{ lookaround: false, consumes: false }];
  let i = 0;

  /** The most times the item just read may repeat, with `i` moved past its quantifier. */
  const quantifiedMax = (): number => {
    const c = source[i];
    let max = 1;
    if (c === '*' || c === '+') max = Infinity;
    else if (c === '?') max = 1;
    else if (c === '{') {
      COUNTED.lastIndex = i;
      const m = COUNTED.exec(source);
      if (m === null) return 1;
      max = m[2] === undefined ? Number(m[1]) : m[2] === '' ? Infinity : Number(m[2]);
      i += m[0].length - 1;
    } else return 1;
    i++;
    if (source[i] === '?') i++; // lazy
    return max;
  };
  const item = (consumes: boolean): void => {
    const max = quantifiedMax();
    if (consumes && max > 0) groups[groups.length - 1]!.consumes = true;
  };

  while (i < source.length) {
    const c = source[i]!;
    if (c === '\\') {
      const read = readEscape(source, i, true, true);
      i = read.end;
      item(read.kind !== 'assertion');
    } else if (c === '[') {
      i++;
      if (source[i] === '^') i++;
      while (i < source.length && source[i] !== ']') i += source[i] === '\\' ? 2 : 1;
      i++;
      item(true);
    } else if (c === '(') {
      i++;
      let lookaround = false;
      if (source[i] === '?') {
        if (source[i + 1] === ':') i += 2;
        else if (source[i + 1] === '=' || source[i + 1] === '!') {
          lookaround = true;
          i += 2;
        } else if (source.startsWith('<=', i + 1) || source.startsWith('<!', i + 1)) {
          lookaround = true;
          i += 3;
        } else if (source[i + 1] === '<') i = Math.max(i, source.indexOf('>', i) + 1 || source.length);
      }
      groups.push({ lookaround, consumes: false });
    } else if (c === ')') {
      i++;
      const inner = groups.length > 1 ? groups.pop()! : { lookaround: false, consumes: false };
      item(inner.consumes && !inner.lookaround);
    } else if (c === '|' || c === '^' || c === '$') {
      i++;
      if (c !== '|') item(false);
    } else {
      // `.` or one character (astral ones included).
      i += String.fromCodePoint(source.codePointAt(i)!).length;
      item(true);
    }
  }
  return groups[0]!.consumes;
}
