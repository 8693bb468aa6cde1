/**
 * Admin authentication: every route registered in the same scope as this plugin (the /api/v1
 * scope) requires `Authorization: Bearer <ZENOVA_ADMIN_TOKEN>`. Tokens are compared as SHA-256
 * digests with timingSafeEqual, so neither the content nor the length leaks through timing.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { zenovaError } from '../errors.js';

export type AdminPrincipal = 'admin';

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

const adminAuthPlugin: FastifyPluginAsync<{ adminToken: string }> = async (app, { adminToken }) => {
  const expected = digest(adminToken);
  app.decorateRequest('principal', undefined);
  app.addHook('onRequest', async (request) => {
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
