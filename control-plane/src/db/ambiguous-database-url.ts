/**
 * Database URLs that the WHATWG parser (and so pg) reads differently from what the operator meant.
 * A password written unencoded with '/', '?' or '#' in it ends the authority early:
 * `postgres://zenova:2024/secret@db:5432/zenova` parses as host `zenova`, port `2024` and a path
 * holding the rest of the password. Such a URL connects somewhere else, and every place that shows
 * "the URL without its password" shows the password instead, so it is refused outright.
 */

/** Why `url` cannot be read unambiguously, or undefined when it can. Never quotes the URL. */
export function ambiguousDatabaseUrlReason(url: URL): string | undefined {
  // The parser takes the last '@' before the first '/', '?' or '#' as the end of the userinfo, so a
  // raw '@' after that is a userinfo cut short (a properly encoded one is %40 and stays encoded).
  const after = [['database name', url.pathname], ['query', url.search], ['fragment', url.hash]] as const;
  const cut = after.find(([, text]) => text.includes('@'));
  if (cut) return `has an '@' in its ${cut[0]}`;
  if (url.pathname.slice(1).includes('/')) return "has a '/' in its database name";
  return undefined;
}

/** The operator's fix, for messages; names characters, never values. */
export const PERCENT_ENCODE_ADVICE =
  "percent-encode the user name and password (e.g. encodeURIComponent): '/' as %2F, '?' as %3F, '#' as %23, '@' as %40, ':' as %3A, '%' as %25";
