/**
 * PostgreSQL's text and jsonb hold neither NUL (U+0000) nor unpaired UTF-16 surrogates, and a
 * JavaScript string can carry both: a record's model name comes from the caller, a guardrail match
 * or a kept answer from the upstream. A record holding one made its whole batch fail, again on
 * every resend, and so held up every record behind it on that node. Such characters are stored as
 * U+FFFD instead (the record says the same thing, minus a character no viewer could show).
 */

/** In JSON.stringify's output: a NUL, or a surrogate it had to escape because it was unpaired. */
const UNSTORABLE_IN_JSON = /\\u0000|\\ud[89a-f][0-9a-f]{2}/i;
// eslint-disable-next-line no-control-regex -- matching NUL is the point
const UNSTORABLE_CHARS = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * `values` as JSON PostgreSQL accepts, and the values that JSON is of. One JSON.stringify when
 * nothing needs replacing (a scan of its output decides); a copy with the characters replaced,
 * keys included, when something does.
 */
export function storableJsonArray<T>(values: readonly T[]): { json: string; values: readonly T[] } {
  const json = JSON.stringify(values);
  if (!UNSTORABLE_IN_JSON.test(json)) return { json, values };
  const cleaned = values.map((value) => storable(value) as T);
  return { json: JSON.stringify(cleaned), values: cleaned };
}

function storable(value: unknown): unknown {
  if (typeof value === 'string') return value.replace(UNSTORABLE_CHARS, '\ufffd');
  if (Array.isArray(value)) return value.map(storable);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, entry]) => [storable(key) as string, storable(entry)]));
  }
  return value;
}
