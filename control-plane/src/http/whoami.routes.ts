/** GET /api/v1/whoami: the authenticated admin principal (registered inside the admin scope). */
import type { FastifyPluginAsync } from 'fastify';
import { zenovaError } from '../errors.js';

export const whoamiRoutes: FastifyPluginAsync = async (app) => {
  app.get('/whoami', async (request) => {
    // admin-auth ran first; a route mounted outside its scope must fail closed, not answer.
    if (!request.principal) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED');
    return { principal: request.principal };
  });
};
