/**
 * Admin authentication: every route registered in the same scope as this plugin (the /api/v1
 * scope) requires `Authorization: Bearer <ZENOVA_ADMIN_TOKEN>` or a live console session cookie
 * (docs/console.md). Tokens are compared as SHA-256 digests with timingSafeEqual, so neither the
 * content nor the length leaks through timing. A request with an Authorization header is judged by
 * it alone (bearer wins over a cookie). A cookie-authenticated request that may change something
 * (any method but GET/HEAD) must carry the session's CSRF token in `x-zenova-csrf`: a browser
 * sends the cookie on its own, the header only when our script adds it. Checked before the body
 * is read, so a refused request changes nothing.
 *
 * A wrong bearer token counts against the client address's failed-admin-token budget, the one the
 * console login uses (failed-auth-limit.ts): past it, every request that the Authorization header
 * would judge is refused with 429 before any token is compared — the right token too, or the
 * lockout would tell a guesser which guess was right. A missing or malformed header compares no
 * token and is not counted; a console session cookie is no guess and is neither counted nor locked out.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type pg from 'pg';
import { CSRF_HEADER, adminTokenTag, csrfTokenMatches, findSession, sessionCookieValues } from '../console/console-sessions.js';
import type { FailedLoginLimiter } from '../console/console-sessions.js';
import { zenovaError } from '../errors.js';
import { createFailedAdminAuthLimiter, failedAdminAuthKey, refuseWhileLockedOut } from './failed-auth-limit.js';

/** `admin`: the bearer token; `console`: a console session cookie (whoami tells them apart). */
export type AdminPrincipal = 'admin' | 'console';

/** Methods that change nothing and need no CSRF token. */
const SAFE_METHODS = new Set(['GET', 'HEAD']);

declare module 'fastify' {
  interface FastifyRequest {
    /** Who the admin API request is from; set by admin-auth for routes in its scope. */
    principal?: AdminPrincipal;
  }
}

const digest = (value: string): Buffer => createHash('sha256').update(value, 'utf8').digest();

/** The token, or why there is none: absent, and present but not `Bearer <token>`, need different fixes. */
function bearerToken(request: FastifyRequest): { token: string } | { problem: string } {
  const header = request.headers.authorization;
  if (typeof header !== 'string' || header.trim() === '') {
    return { problem: 'Missing admin bearer token: send Authorization: Bearer <ZENOVA_ADMIN_TOKEN>.' };
  }
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  if (match?.[1] === undefined) {
    // Never the header itself: it may hold the token (a missing "Bearer ", a space inside it).
    return { problem: 'Malformed Authorization header: it must be exactly "Bearer <ZENOVA_ADMIN_TOKEN>" (one token, no spaces in it).' };
  }
  return { token: match[1] };
}

export interface AdminAuthOptions {
  adminToken: string;
  /** Where console sessions live; without it only the bearer token is accepted. */
  pool?: pg.Pool | undefined;
  /**
   * The failed-admin-token budget shared with the console login (app.ts passes the same one to
   * both); without it the bearer check keeps a budget of its own.
   */
  failedAuthLimiter?: FailedLoginLimiter | undefined;
}

const adminAuthPlugin: FastifyPluginAsync<AdminAuthOptions> = async (app, { adminToken, pool, failedAuthLimiter }) => {
  const expected = digest(adminToken);
  const limiter = failedAuthLimiter ?? createFailedAdminAuthLimiter();
  const tokenTag = adminTokenTag(adminToken);
  app.decorateRequest('principal', undefined);
  app.addHook('onRequest', async (request, reply) => {
    const authorization = request.headers.authorization;
    // Every session cookie value: a stray copy planted on a longer path is sent first (console-sessions.ts).
    const cookies = pool === undefined ? [] : sessionCookieValues(request.headers.cookie);
    if (pool !== undefined && cookies.length > 0 && (typeof authorization !== 'string' || authorization.trim() === '')) {
      const session = await findSession(pool, cookies, tokenTag);
      if (!session) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED', 'The console session has expired or was logged out; log in again with the admin token.');
      if (!SAFE_METHODS.has(request.method) && !csrfTokenMatches(session, request.headers[CSRF_HEADER])) {
        throw zenovaError('ZN_ERR_CP_CSRF');
      }
      request.principal = 'console';
      return;
    }
    const limitKey = failedAdminAuthKey(request.ip);
    refuseWhileLockedOut(limiter, limitKey, reply);
    const found = bearerToken(request);
    if ('problem' in found) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED', found.problem);
    // Checked and counted in one synchronous step: concurrent guesses cannot all pass the check.
    if (!timingSafeEqual(digest(found.token), expected)) {
      limiter.recordFailure(limitKey);
      throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED', 'Invalid admin bearer token.');
    }
    request.principal = 'admin';
  });
};

// Like fastify-plugin: the hook applies to the scope that registers us, not to a scope of our own.
Object.assign(adminAuthPlugin, { [Symbol.for('skip-override')]: true });

export const adminAuth = adminAuthPlugin;
