/**
 * The charset a Content-Type declares, for JSON the node reads as UTF-8: a caller's body (app.ts)
 * and a tool server's answer (mcp-call.ts). Text declared in another charset would be misread, not
 * converted, so it is refused rather than read.
 */

/** JSON is read as UTF-8; these declared charsets are UTF-8 or a subset of it. */
const READABLE_CHARSETS = new Set(['utf-8', 'utf8', 'us-ascii']);

/** The charset parameter of a Content-Type, lower-cased and unquoted, or undefined when it has none. */
function charsetOf(contentType: string | undefined): string | undefined {
  if (contentType === undefined) return undefined;
  for (const param of contentType.split(';').slice(1)) {
    const eq = param.indexOf('=');
    if (eq < 0 || param.slice(0, eq).trim().toLowerCase() !== 'charset') continue;
    const value = param.slice(eq + 1).trim();
    return (value.length >= 2 && value.startsWith('"') && value.endsWith('"') ? value.slice(1, -1) : value).toLowerCase();
  }
  return undefined;
}

/** The charset a Content-Type declares when it is one JSON cannot be read as UTF-8 in; undefined when it is readable or none. */
export function unreadableCharset(contentType: string | undefined): string | undefined {
  const charset = charsetOf(contentType);
  return charset !== undefined && !READABLE_CHARSETS.has(charset) ? charset : undefined;
}
