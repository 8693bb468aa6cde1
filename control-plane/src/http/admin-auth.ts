/**
 * Admin authentication: every route registered in the same scope as this plugin (the /api/v1
 * scope) requires `Authorization: Bearer <ZENOVA_ADMIN_TOKEN>` or a live console session cookie
 * (docs/console.md). Tokens are compared as SHA-256 digests with timingSafeEqual, so neither the
 * content nor the length leaks through timing. A request with an Authorization header is judged by
 * it alone (bearer wins over a cookie). A cookie-authenticated request that may change something
 * (any method but GET/HEAD) must carry the session's CSRF token in `x-zenova-csrf`: a browser
 * sends the cookie on its own, the header only when our script adds it. Checked before the body
 * is read, so a refused request changes nothing.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type pg from 'pg';
import { CSRF_HEADER, adminTokenTag, csrfTokenMatches, findSession, sessionCookieValue } from '../console/console-sessions.js';
import { zenovaError } from '../errors.js';

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
}

const adminAuthPlugin: FastifyPluginAsync<AdminAuthOptions> = async (app, { adminToken, pool }) => {
  const expected = digest(adminToken);
  const tokenTag = adminTokenTag(adminToken);
  app.decorateRequest('principal', undefined);
  app.addHook('onRequest', async (request) => {
    const authorization = request.headers.authorization;
    const cookie = pool === undefined ? undefined : sessionCookieValue(request.headers.cookie);
    if (pool !== undefined && cookie !== undefined && (typeof authorization !== 'string' || authorization.trim() === '')) {
      const session = await findSession(pool, cookie, tokenTag);
      if (!session) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED', 'The console session has expired or was logged out; log in again with the admin token.');
      if (!SAFE_METHODS.has(request.method) && !csrfTokenMatches(session, request.headers[CSRF_HEADER])) {
        throw zenovaError('ZN_ERR_CP_CSRF');
      }
      request.principal = 'console';
      return;
    }
    const found = bearerToken(request);
    if ('problem' in found) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED', found.problem);
    if (!timingSafeEqual(digest(found.token), expected)) {
      throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED', 'Invalid admin bearer token.');
    }
    request.principal = 'admin';
  });
};

// Like fastify-plugin: the hook applies to the scope that registers us, not to a scope of our own.
Object.assign(adminAuthPlugin, { [Symbol.for('skip-override')]: true });

export const adminAuth = adminAuthPlugin;
