/** GET /api/v1/config/version (inside the admin scope): the latest config version. */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { latestConfigVersion } from '../config/config-changes.js';
import { zenovaError } from '../errors.js';
import type { ZodTypeProvider } from './zod-schemas.js';

export const configVersionRoutes: FastifyPluginAsync<{ pool: pg.Pool }> = async (fastify, { pool }) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  // Fail closed if this plugin is ever mounted outside the admin scope.
  app.addHook('preHandler', async (request) => {
    if (!request.principal) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED');
  });

  app.get('/config/version', {
    schema: { response: { 200: z.object({ version: z.number() }) } },
  }, async () => ({ version: await latestConfigVersion(pool) }));
};
