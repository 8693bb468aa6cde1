/**
 * A JSON body that writes a key twice in one object is refused rather than read: JSON.parse keeps
 * the last value, other parsers (a proxy, an audit log, the operator's own tooling) may keep the
 * first, so `{"amountMicros": 1, "amountMicros": 1000000}` would mean different things to what
 * checked it and what acted on it.
 */

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * The first key written twice in one object of `text`, a JSON text that already parsed (so it is
 * well formed: only strings, brackets, commas and colons need telling apart); undefined when none.
 * One pass, no recursion (nesting is bounded only by the body limit).
 */
export function repeatedJsonKey(text: string): string | undefined {
  // Per open bracket: the keys of an object, or null for an array.
  const open: Array<Set<string> | null> = [];
  // Whether the next string in the innermost object is a key (after `{` or `,`).
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      let end = i + 1;
      while (text.charCodeAt(end) !== QUOTE) end += text.charCodeAt(end) === BACKSLASH ? 2 : 1;
      const keys = open[open.length - 1];
      if (expectKey && keys !== undefined && keys !== null) {
        const key = JSON.parse(text.slice(i, end + 1)) as string;
        if (keys.has(key)) return key;
        keys.add(key);
        expectKey = false;
      }
      i = end;
    } else if (c === 0x7b /* { */) {
      open.push(new Set());
      expectKey = true;
    } else if (c === 0x5b /* [ */) {
      open.push(null);
      expectKey = false;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      open.pop();
      expectKey = false;
    } else if (c === 0x2c /* , */) {
      expectKey = open[open.length - 1] !== null && open.length > 0;
    }
  }
  return undefined;
}
