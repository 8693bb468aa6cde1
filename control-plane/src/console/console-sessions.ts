/**
 * Console sessions: a browser logs in once with the admin token and then holds a random session id
 * in an HttpOnly cookie instead of the token (docs/console.md). Only the id's SHA-256 is stored;
 * the CSRF token is derived from the id (HMAC), so it is never stored either. Expiry is judged by
 * the database's clock, the one that stamped the row. Each row also holds a tag of the admin token
 * it was opened with: a control plane restarted with another ZENOVA_ADMIN_TOKEN (the old one
 * leaked) accepts none of the sessions the old token opened.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { isIPv4, isIPv6 } from 'node:net';
import type pg from 'pg';
import { FixedWindowRateLimiter } from '../nodes/enroll-rate-limit.js';
import type { RateLimitDecision } from '../nodes/enroll-rate-limit.js';

export const SESSION_COOKIE = 'zenova_console';
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000;
export const CSRF_HEADER = 'x-zenova-csrf';
const CSRF_LABEL = 'zenova-console-csrf';
// 32 random bytes in base64url, unpadded: what newSessionId makes and the only shape looked up.
const SESSION_ID = /^[A-Za-z0-9_-]{43}$/;

export interface ConsoleSession {
  /** The raw id (the cookie's value); kept in memory only, to derive the CSRF token. */
  id: string;
  expiresAt: Date;
}

export function newSessionId(): string {
  return randomBytes(32).toString('base64url');
}

export function sessionIdHash(id: string): Buffer {
  return createHash('sha256').update(id, 'utf8').digest();
}

/** HMAC-SHA256(key = session id, "zenova-console-csrf"), base64url: the header unsafe requests carry. */
export function csrfTokenFor(id: string): string {
  return createHmac('sha256', id).update(CSRF_LABEL, 'utf8').digest('base64url');
}

/** Whether `header` (x-zenova-csrf as received) is the session's CSRF token; constant-time. */
export function csrfTokenMatches(session: ConsoleSession, header: string | string[] | undefined): boolean {
  if (typeof header !== 'string') return false;
  const expected = createHash('sha256').update(csrfTokenFor(session.id)).digest();
  return timingSafeEqual(createHash('sha256').update(header, 'utf8').digest(), expected);
}

/** HMAC-SHA256(key = admin token, label): names the token a session was opened with, reveals nothing of it. */
export function adminTokenTag(adminToken: string): Buffer {
  return createHmac('sha256', adminToken).update('zenova-console-session', 'utf8').digest();
}

export async function createSession(pool: pg.Pool, tokenTag: Buffer, ttlMs: number = SESSION_TTL_MS): Promise<ConsoleSession> {
  const id = newSessionId();
  // Sweep what has expired or another admin token opened, so the table holds live sessions only
  // (logins are rare).
  await pool.query('delete from console_sessions where expires_at <= now() or token_tag <> $1', [tokenTag]);
  const { rows } = await pool.query<{ expires_at: Date }>(
    `insert into console_sessions (id_hash, token_tag, expires_at) values ($1, $2, now() + make_interval(secs => $3::double precision / 1000))
     returning expires_at`,
    [sessionIdHash(id), tokenTag, ttlMs],
  );
  return { id, expiresAt: rows[0]!.expires_at };
}

/**
 * The live session opened with the current admin token among these ids (a Cookie header's
 * `zenova_console` values, sessionCookieValues), the first in their order that is one; or undefined
 * (none is: unknown, expired, logged out, opened with a replaced token, or not an id at all). Every
 * value is looked at, not only the first: a stray cookie planted with a longer Path (sent first)
 * would otherwise hide the real one and keep the browser logging in for ever.
 */
export async function findSession(
  pool: pg.Pool, ids: string | readonly string[] | undefined, tokenTag: Buffer,
): Promise<ConsoleSession | undefined> {
  const candidates = (typeof ids === 'string' ? [ids] : ids ?? []).filter((id) => SESSION_ID.test(id));
  if (candidates.length === 0) return undefined;
  const hashes = candidates.map(sessionIdHash);
  const { rows } = await pool.query<{ id_hash: Buffer; expires_at: Date }>(
    'select id_hash, expires_at from console_sessions where id_hash = any($1::bytea[]) and token_tag = $2 and expires_at > now()',
    [hashes, tokenTag],
  );
  for (const [i, hash] of hashes.entries()) {
    const row = rows.find((r) => r.id_hash.equals(hash));
    if (row) return { id: candidates[i]!, expiresAt: row.expires_at };
  }
  return undefined;
}

/** Deletes the sessions with these ids, whichever exist (a login or logout ending every session the browser presented). */
export async function deleteSessions(pool: pg.Pool, ids: readonly string[]): Promise<void> {
  const hashes = ids.filter((id) => SESSION_ID.test(id)).map(sessionIdHash);
  if (hashes.length === 0) return;
  await pool.query('delete from console_sessions where id_hash = any($1::bytea[])', [hashes]);
}

/**
 * How many `zenova_console` values of one Cookie header are looked at: the browser's own and a few
 * strays (other paths, a parent domain's); a header stuffed with more costs no more than this.
 */
export const MAX_SESSION_COOKIE_VALUES = 8;

/**
 * Every `zenova_console` value in a Cookie header, in the header's order, at most
 * MAX_SESSION_COOKIE_VALUES (empty when there is none). A browser sends each cookie of that name
 * it holds (one per path and domain), the longest path first.
 */
export function sessionCookieValues(cookieHeader: string | undefined): string[] {
  const values: string[] = [];
  if (typeof cookieHeader !== 'string') return values;
  for (const part of cookieHeader.split(';')) {
    const eq = part.indexOf('=');
    if (eq === -1) continue;
    if (part.slice(0, eq).trim() !== SESSION_COOKIE) continue;
    values.push(part.slice(eq + 1).trim());
    if (values.length === MAX_SESSION_COOKIE_VALUES) break;
  }
  return values;
}

/**
 * The Set-Cookie value for a session. No Max-Age: the cookie ends with the browser, the row with
 * its 12 h. Secure whenever the console is reached over HTTPS.
 */
export function sessionCookie(id: string, secure: boolean): string {
  return `${SESSION_COOKIE}=${id}; HttpOnly; SameSite=Strict; Path=/${secure ? '; Secure' : ''}`;
}

export function clearedSessionCookie(secure: boolean, path = '/'): string {
  return `${SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=${path}; Max-Age=0${secure ? '; Secure' : ''}`;
}

/**
 * Where a stray session cookie most likely sits: a path of our API, sent before ours (Path=/) for
 * every API call. A login that sees more than one value clears these too (a stray set for a
 * parent domain is out of our reach; findSession looks past it).
 */
export const STRAY_SESSION_COOKIE_PATHS = ['/api', '/api/console', '/api/v1'] as const;

/** An IPv6 address's eight 16-bit groups, or undefined when it is not one. */
function ipv6Groups(address: string): number[] | undefined {
  if (!isIPv6(address)) return undefined;
  let text = address;
  // A trailing dotted quad (::ffff:1.2.3.4, ::1.2.3.4) is the last two groups.
  const dotted = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted[2]!.split('.').map(Number) as [number, number, number, number];
    text = `${dotted[1]!}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.includes('::') ? text.split('::') as [string, string] : [text, undefined];
  const parse = (part: string): number[] => (part === '' ? [] : part.split(':').map((g) => parseInt(g, 16)));
  const front = parse(head);
  if (tail === undefined) return front;
  const back = parse(tail);
  return [...front, ...new Array<number>(8 - front.length - back.length).fill(0), ...back];
}

/**
 * The failed-login limiter's key for a client address: an IPv4 address as is (also when it comes
 * IPv4-mapped, ::ffff:a.b.c.d), an IPv6 address by its /64. One host usually holds a whole /64, so
 * keying by full address would let it spread its guesses over 2^64 addresses.
 */
export function loginLimitKey(ip: string): string {
  const address = ip.replace(/%.*$/, ''); // a zone id (fe80::1%eth0) names an interface, not a host
  if (isIPv4(address)) return address;
  const groups = ipv6Groups(address);
  if (groups === undefined) return ip;
  if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) {
    return [groups[6]! >> 8, groups[6]! & 0xff, groups[7]! >> 8, groups[7]! & 0xff].join('.');
  }
  return `${groups.slice(0, 4).map((g) => g.toString(16)).join(':')}::/64`;
}

/**
 * Failed logins per client (loginLimitKey) in a fixed window, in memory (per replica). Only
 * failures count, and while a client is over the limit even the right token is refused, so the
 * limit is no oracle.
 */
export class FailedLoginLimiter {
  private readonly windows: FixedWindowRateLimiter;

  constructor(limit: number, windowMs: number, maxKeys?: number) {
    this.windows = new FixedWindowRateLimiter({ limit, windowMs, ...(maxKeys !== undefined ? { maxKeys } : {}) });
  }

  check(key: string, nowMs: number = Date.now()): RateLimitDecision {
    return this.windows.peek(key, nowMs);
  }

  recordFailure(key: string, nowMs: number = Date.now()): void {
    this.windows.hit(key, nowMs);
  }
}
