/**
 * The rules every base URL the control plane stores must keep (a control-plane callback URL, an
 * upstream's API base): parseable, a host, no credentials, no query or fragment — nodes append
 * paths to it. Callers add their own rules (scheme, characters) around it.
 */
/**
 * The WHATWG parser silently drops tabs and newlines and trims the ends, so the URL it checked
 * would not be the string stored and handed to nodes: refuse them (and spaces) before any parsing.
 */
export function urlCharactersProblem(value: string): string | undefined {
  return /[\p{Cc}\s]/u.test(value) ? 'must not contain spaces or control characters' : undefined;
}

export function baseUrlShapeProblem(value: string, credentialsHint = ''): string | undefined {
  const characters = urlCharactersProblem(value);
  if (characters) return characters;
  // The WHATWG parser reads `\` as `/` and `https:///v1` as host "v1": the string stored would
  // not say what the nodes call. Refuse both forms rather than store one that means another.
  if (value.includes('\\')) return 'must not contain a backslash (use /)';
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return 'must be a valid URL';
  }
  if (!url.hostname || !/^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/]/.test(value)) return 'must name a host right after the scheme (scheme://host)';
  if (url.username || url.password) return `must not contain a user name or password${credentialsHint}`;
  if (url.port === '0') return 'must not use port 0 (no server listens there)';
  if (url.search || url.hash || value.includes('?') || value.includes('#')) return 'must not contain a query or fragment';
  return undefined;
}

/**
 * A scheme is case-insensitive (RFC 3986 §3.1), but the tables' CHECKs (`~ '^https?://'`) and the
 * nodes compare it as written: store its normal, lower-case form (`HTTPS://` was a 500).
 */
export const withLowerCaseScheme = (value: string): string => value.replace(/^[A-Za-z][A-Za-z0-9+.-]*:/, (scheme) => scheme.toLowerCase());

/** Nodes append paths (/api/enroll, /chat/completions): keep the base without a trailing slash. */
export const withoutTrailingSlash = (value: string): string => value.replace(/\/+$/, '');
