/**
 * The backtracking shape that makes a JavaScript regex take exponential time: a repeated group
 * that itself holds a repeated item (`(a+)+`, `(\w+\s?)+$`, `(?:x*y?)*`). A few dozen characters of
 * caller text can then hold the event loop for seconds, and a regex cannot be interrupted, so such
 * patterns are refused, not run. Shared by both sides: the control plane refuses them at the admin
 * API; the node checks again for config that predates that check, and fails closed on them.
 */

/** Why `source` (without the `(?i)` prefix) is refused, or null when it has no nested repetition. */
export function nestedRepetition(source: string): string | null {
  // One frame per open group: does it contain an item whose length varies by repetition (a+, b*, c{2,5})?
  const frames: boolean[] = [false];
  let i = 0;
  /** Reads a quantifier at `i`, if any: can it repeat (more than once), and is its count variable? */
  const quantifier = (): { repeats: boolean; variable: boolean } => {
    const c = source[i];
    let min = 1;
    let max = 1;
    if (c === '*' || c === '+' || c === '?') {
      min = c === '+' ? 1 : 0;
      max = c === '?' ? 1 : Infinity;
      i++;
    } else if (c === '{') {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(source.slice(i, i + 24));
      if (m === null) return { repeats: false, variable: false };
      min = Number(m[1]);
      max = m[2] === undefined ? min : m[3] === '' ? Infinity : Number(m[3]);
      i += m[0].length;
    } else {
      return { repeats: false, variable: false };
    }
    if (source[i] === '?') i++; // lazy
    return { repeats: max > 1, variable: max > min && max > 1 };
  };
  const item = (): void => {
    if (quantifier().variable) frames[frames.length - 1] = true;
  };
  while (i < source.length) {
    const c = source[i]!;
    if (c === '\\') {
      // An escape is one item; \p{…}, \u{…}, \k<…> carry their own braces.
      i += 2;
      if (/[pPu]/.test(source[i - 1] ?? '') && source[i] === '{') i = Math.max(i, source.indexOf('}', i) + 1 || source.length);
      if (source[i - 1] === 'k' && source[i] === '<') i = Math.max(i, source.indexOf('>', i) + 1 || source.length);
      item();
    } else if (c === '[') {
      // A class is one item: skip to its unescaped end.
      i++;
      if (source[i] === ']') i++;
      while (i < source.length && source[i] !== ']') i += source[i] === '\\' ? 2 : 1;
      i++;
      item();
    } else if (c === '(') {
      frames.push(false);
      i++;
    } else if (c === ')') {
      const inner = frames.length > 1 ? frames.pop()! : false;
      i++;
      const q = quantifier();
      if (q.repeats && inner) return 'it repeats a group that itself contains a repeated item (nested quantifiers such as (a+)+), which can take exponential time';
      if (q.variable || inner) frames[frames.length - 1] = true;
    } else {
      i++;
      item();
    }
  }
  return null;
}
