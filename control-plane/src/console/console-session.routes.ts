/**
 * The console's session routes, outside /api/v1 (docs/console.md): `POST /api/console/login`
 * trades the admin token for a session cookie, `GET /api/console/session` tells the page whether it
 * has one (and its CSRF token, and ZENOVA_PUBLIC_URL), `POST /api/console/logout` ends it. The
 * admin token is compared as admin-auth compares it and never logged (the logger censors
 * `adminToken` keys and the token's value; fastify logs no bodies).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { zenovaError } from '../errors.js';
import { MAX_ADMIN_TOKEN_LENGTH } from '../settings.js';
import type { Settings } from '../settings.js';
import type { ZodTypeProvider } from '../http/zod-schemas.js';
import {
  FAILED_ADMIN_AUTHS_PER_MINUTE, createFailedAdminAuthLimiter, failedAdminAuthKey, refuseWhileLockedOut,
} from '../http/failed-auth-limit.js';
import {
  CSRF_HEADER, SESSION_TTL_MS, STRAY_SESSION_COOKIE_PATHS, clearedSessionCookie, createSession, csrfTokenFor,
  csrfTokenMatches, adminTokenTag, deleteSessions, findSession, sessionCookie, sessionCookieValues,
} from './console-sessions.js';
import type { ConsoleSession, FailedLoginLimiter } from './console-sessions.js';

export const CONSOLE_API_PREFIX = '/api/console';
/**
 * A login body is one token of at most MAX_ADMIN_TOKEN_LENGTH characters, each of which JSON may
 * escape to two (`"`, `\`); nothing bigger is read.
 */
export const LOGIN_BODY_LIMIT_BYTES = 2 * MAX_ADMIN_TOKEN_LENGTH + 64;
export const FAILED_LOGINS_PER_MINUTE = FAILED_ADMIN_AUTHS_PER_MINUTE;

const loginBodySchema = z.strictObject({
  adminToken: z.string().min(1, 'must not be empty').max(MAX_ADMIN_TOKEN_LENGTH, `must be at most ${MAX_ADMIN_TOKEN_LENGTH} characters`),
});
// publicUrl: ZENOVA_PUBLIC_URL as configured (null: unset), for the Add Node wizard's default
// control-plane URL; a page behind a reverse proxy cannot know the address nodes should use.
const sessionAnswerSchema = z.object({ csrfToken: z.string(), expiresAt: z.string(), publicUrl: z.string().nullable() });

export interface ConsoleSessionRoutesOptions {
  pool: pg.Pool;
  settings: Settings;
  /**
   * The failed-admin-token budget shared with admin-auth's bearer check (app.ts passes one to
   * both, http/failed-auth-limit.ts); without it the login keeps a budget of its own.
   */
  failedAuthLimiter?: FailedLoginLimiter | undefined;
  /** Test seam for a budget of its own; the product always uses 10 per minute. */
  failedLoginsPerMinute?: number;
}

const digest = (value: string): Buffer => createHash('sha256').update(value, 'utf8').digest();

export const consoleSessionRoutes: FastifyPluginAsync<ConsoleSessionRoutesOptions> = async (fastify, opts) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  const { pool, settings } = opts;
  const expected = digest(settings.adminToken);
  const tokenTag = adminTokenTag(settings.adminToken);
  const limiter = opts.failedAuthLimiter ?? createFailedAdminAuthLimiter(opts.failedLoginsPerMinute ?? FAILED_LOGINS_PER_MINUTE);
  // Secure whenever the browser reached us over HTTPS: our own TLS, or a named proxy's X-Forwarded-Proto.
  const secure = (request: FastifyRequest): boolean => settings.tls !== undefined || request.protocol === 'https';
  const answer = (session: ConsoleSession): z.input<typeof sessionAnswerSchema> => ({
    csrfToken: csrfTokenFor(session.id),
    expiresAt: session.expiresAt.toISOString(),
    publicUrl: settings.publicUrl ?? null,
  });
  const liveSession = async (request: FastifyRequest, reply: FastifyReply): Promise<ConsoleSession> => {
    const ids = sessionCookieValues(request.headers.cookie);
    const session = await findSession(pool, ids, tokenTag);
    if (session) return session;
    // A stale cookie is of no use to anyone: let the browser drop it.
    if (ids.length > 0) void reply.header('set-cookie', clearedSessionCookie(secure(request)));
    throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED', 'No console session (or it has expired); log in with the admin token.');
  };

  app.post(`${CONSOLE_API_PREFIX}/login`, {
    bodyLimit: LOGIN_BODY_LIMIT_BYTES,
    schema: { body: loginBodySchema, response: { 200: sessionAnswerSchema } },
  }, async (request, reply) => {
    // IPv6 by /64: a host that holds a /64 does not get a fresh limit per address.
    const limitKey = failedAdminAuthKey(request.ip);
    refuseWhileLockedOut(limiter, limitKey, reply);
    // Checked and counted in one synchronous step: concurrent guesses cannot all pass the check.
    if (!timingSafeEqual(digest(request.body.adminToken), expected)) {
      limiter.recordFailure(limitKey);
      throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED', 'Invalid admin token.');
    }
    // A browser logging in again replaces its session rather than leaving the old one live: every
    // session id it presented is ended (a stray cookie beside its own must not hide one).
    const presented = sessionCookieValues(request.headers.cookie);
    await deleteSessions(pool, presented);
    const session = await createSession(pool, tokenTag, SESSION_TTL_MS);
    request.log.info({ expiresAt: session.expiresAt.toISOString() }, 'console login');
    const cookies = [sessionCookie(session.id, secure(request))];
    // More than one value: a stray copy (planted, or left by an older path) sits beside ours; expire
    // it where it most likely is, so it stops riding along on every call.
    if (presented.length > 1) cookies.push(...STRAY_SESSION_COOKIE_PATHS.map((path) => clearedSessionCookie(secure(request), path)));
    void reply.header('set-cookie', cookies);
    return answer(session);
  });

  app.get(`${CONSOLE_API_PREFIX}/session`, {
    schema: { response: { 200: sessionAnswerSchema } },
  }, async (request, reply) => answer(await liveSession(request, reply)));

  app.post(`${CONSOLE_API_PREFIX}/logout`, {
    bodyLimit: LOGIN_BODY_LIMIT_BYTES,
    schema: { response: { 200: z.strictObject({}) } },
  }, async (request, reply) => {
    const session = await liveSession(request, reply);
    if (!csrfTokenMatches(session, request.headers[CSRF_HEADER])) throw zenovaError('ZN_ERR_CP_CSRF');
    // Every session the browser presented ends, as at login: the CSRF token proved this one, and a
    // stray cookie sent first must not be the only session ended while the browser's own stays live.
    const presented = sessionCookieValues(request.headers.cookie);
    await deleteSessions(pool, presented);
    request.log.info('console logout');
    const cookies = [clearedSessionCookie(secure(request))];
    if (presented.length > 1) cookies.push(...STRAY_SESSION_COOKIE_PATHS.map((path) => clearedSessionCookie(secure(request), path)));
    void reply.header('set-cookie', cookies);
    return {};
  });
};
