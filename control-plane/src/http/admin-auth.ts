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

function bearerToken(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (typeof header !== 'string') return undefined;
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  return match?.[1];
}

const adminAuthPlugin: FastifyPluginAsync<{ adminToken: string }> = async (app, { adminToken }) => {
  const expected = digest(adminToken);
  app.decorateRequest('principal', undefined);
  app.addHook('onRequest', async (request) => {
    const token = bearerToken(request);
    if (token === undefined) {
      throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED', 'Missing admin bearer token: send Authorization: Bearer <ZENOVA_ADMIN_TOKEN>.');
    }
    if (!timingSafeEqual(digest(token), expected)) {
      throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED', 'Invalid admin bearer token.');
    }
    request.principal = 'admin';
  });
};

// Like fastify-plugin: the hook applies to the scope that registers us, not to a scope of our own.
Object.assign(adminAuthPlugin, { [Symbol.for('skip-override')]: true });

export const adminAuth = adminAuthPlugin;
