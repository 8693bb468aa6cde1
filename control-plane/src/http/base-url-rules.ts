/**
 * The rules every base URL the control plane stores must keep (a control-plane callback URL, an
 * upstream's API base): parseable, a host written as the parser reads it, no credentials, no query
 * or fragment — nodes append paths to it; no `.`/`..` path segment (dotSegmentProblem). Callers add
 * their own rules (scheme, characters) around them.
 */
import { isIP } from 'node:net';
import { domainToUnicode } from 'node:url';

/**
 * The WHATWG parser silently drops tabs and newlines and trims the ends, so the URL it checked
 * would not be the string stored and handed to nodes: refuse them (and spaces) before any parsing.
 */
export function urlCharactersProblem(value: string): string | undefined {
  return /[\p{Cc}\s]/u.test(value) ? 'must not contain spaces or control characters' : undefined;
}

/**
 * A `.` or `..` path segment, also written with `%2e` (any case): nodes resolve the URL with the
 * WHATWG parser, which removes them (`/v1/../admin` is `/admin`, `/v1/%2E%2E/x` is `/x`), so the
 * path stored and shown would not be the one called. Only the path is looked at (up to `?`/`#`,
 * which baseUrlShapeProblem refuses on its own). Used for an upstream's baseUrl, a tool server's
 * url and a node's controlPlaneUrl.
 */
export function dotSegmentProblem(value: string): string | undefined {
  const afterScheme = value.slice(value.indexOf('://') + 3);
  const slash = afterScheme.search(/[/?#]/);
  if (slash === -1 || afterScheme[slash] !== '/') return undefined;
  const path = afterScheme.slice(slash).split(/[?#]/, 1)[0] ?? '';
  for (const segment of path.split('/')) {
    const dots = segment.replace(/%2e/gi, '.');
    if (dots === '.' || dots === '..') {
      const readAs = segment === dots ? '' : `read as '${dots}'; `;
      return `must not contain the path segment '${segment}' (${readAs}the URL parser resolves it away, so nodes would call another path); write the path without '.' or '..' segments`;
    }
  }
  return undefined;
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
  // `https://@api.example.com` has an empty user name: the parser drops it, so the string stored
  // would not be the one called (and `a@b` reads as host b).
  const authority = writtenAuthority(value);
  if (authority.includes('@')) return "must not contain '@' before the host (it starts a user name)";
  if (!sameHostAsWritten(writtenHost(authority), url.hostname)) {
    return 'must write the host as it is read (an IPv4 address as four plain decimal numbers; a name without %-escapes, full-width or invisible characters)';
  }
  if (url.port === '0') return 'must not use port 0 (no server listens there)';
  if (url.search || url.hash || value.includes('?') || value.includes('#')) return 'must not contain a query or fragment';
  return undefined;
}

/** What follows `scheme://` up to the path, query or fragment (a backslash was refused before). */
function writtenAuthority(value: string): string {
  return value.slice(value.indexOf('://') + 3).split(/[/?#]/, 1)[0] ?? '';
}

/** The authority less its `:port`; an IPv6 host keeps its brackets. */
function writtenHost(authority: string): string {
  if (authority.startsWith('[')) return authority.slice(0, authority.indexOf(']') + 1);
  const colon = authority.indexOf(':');
  return colon === -1 ? authority : authority.slice(0, colon);
}

/** Lower case one code point at a time: `Σ` is `σ` to IDNA wherever it stands, never a final `ς`. */
const lowerCase = (text: string): string => Array.from(text, (c) => c.toLowerCase()).join('');

/** The label separators IDNA maps to `.` (ideographic, full-width and half-width full stops). */
const LABEL_SEPARATORS = /[.\u3002\uff0e\uff61]/;

/**
 * Whether the host as written names the host the parser read (`hostname`), differing only in
 * letter case, NFC, IDN form (Unicode or punycode, label by label) or IPv6 spelling. Anything
 * else the parser rewrote — `0x7f.1` is 127.0.0.1, `1.2.3` is 1.2.0.3, `a%2eb` is `a.b`, a
 * full-width letter or soft hyphen is mapped or dropped — means a host the string does not show.
 */
function sameHostAsWritten(written: string, hostname: string): boolean {
  // The parser accepts only one notation for an IPv6 address (no hex or short IPv4 tail); it
  // merely compresses zeros and lowers hex digits.
  if (written.startsWith('[')) return hostname.startsWith('[');
  // An IPv4 address is stored as written only in its one plain form.
  if (isIP(hostname) === 4) return written === hostname;
  const writtenLabels = lowerCase(written).normalize('NFC').split(LABEL_SEPARATORS);
  const labels = hostname.split('.');
  return writtenLabels.length === labels.length
    && labels.every((label, i) => writtenLabels[i] === label || writtenLabels[i] === domainToUnicode(label));
}

/**
 * A scheme is case-insensitive (RFC 3986 §3.1), but the tables' CHECKs (`~ '^https?://'`) and the
 * nodes compare it as written: store its normal, lower-case form (`HTTPS://` was a 500).
 */
export const withLowerCaseScheme = (value: string): string => value.replace(/^[A-Za-z][A-Za-z0-9+.-]*:/, (scheme) => scheme.toLowerCase());

/** Nodes append paths (/api/enroll, /chat/completions): keep the base without a trailing slash. */
export const withoutTrailingSlash = (value: string): string => value.replace(/\/+$/, '');
