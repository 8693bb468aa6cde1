/**
 * The model routes admin API (inside the /api/v1 admin scope): create, list, show, replace,
 * delete. An alias may contain '/': send it as %2F in the path.
 */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { nameParam, parseConfigInput, refuseBodyFields } from '../config/config-fields.js';
import { zenovaError } from '../errors.js';
import { createModelRoute, deleteModelRoute, getModelRoute, listModelRoutes, replaceModelRoute } from '../routes-config/model-route-store.js';
import { modelRouteCreateSchema, modelRouteReplaceSchema } from '../routes-config/model-route-validation.js';
import { modelRouteEtag, modelRouteViewSchema, toModelRouteView } from '../routes-config/model-route-view.js';
import { readIfMatch } from './if-match.js';
import { noQuerySchema } from './zod-schemas.js';
import type { ZodTypeProvider } from './zod-schemas.js';

const aliasParams = z.object({ alias: nameParam() });
const mutationReply = z.object({ route: modelRouteViewSchema, configVersion: z.number() });

export const modelRoutesRoutes: FastifyPluginAsync<{ pool: pg.Pool }> = async (fastify, { pool }) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  // Fail closed if this plugin is ever mounted outside the admin scope.
  app.addHook('preHandler', async (request) => {
    if (!request.principal) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED');
  });

  app.post('/routes', { schema: { response: { 201: mutationReply } } }, async (request, reply) => {
    const input = parseConfigInput(modelRouteCreateSchema, request.body);
    const { value, configVersion } = await createModelRoute(pool, input);
    request.log.info({ alias: value.alias, routeId: value.id, configVersion }, 'model route created');
    return reply.status(201).send({ route: toModelRouteView(value), configVersion });
  });

  app.get('/routes', {
    schema: { querystring: noQuerySchema, response: { 200: z.object({ routes: z.array(modelRouteViewSchema) }) } },
  }, async () => ({ routes: (await listModelRoutes(pool)).map(toModelRouteView) }));

  app.get('/routes/:alias', {
    schema: { params: aliasParams, response: { 200: modelRouteViewSchema } },
  }, async (request, reply) => {
    const route = await getModelRoute(pool, request.params.alias);
    void reply.header('etag', modelRouteEtag(route));
    return toModelRouteView(route);
  });

  app.put('/routes/:alias', { schema: { params: aliasParams, response: { 200: mutationReply } } }, async (request, reply) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    const spec = parseConfigInput(modelRouteReplaceSchema, request.body);
    const { value, configVersion } = await replaceModelRoute(pool, request.params.alias, spec, ifMatch);
    request.log.info({ alias: value.alias, routeId: value.id, configVersion }, 'model route replaced');
    void reply.header('etag', modelRouteEtag(value));
    return { route: toModelRouteView(value), configVersion };
  });

  app.delete('/routes/:alias', {
    schema: { params: aliasParams, response: { 200: z.object({ deleted: z.string(), configVersion: z.number() }) } },
  }, async (request) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    refuseBodyFields(request.body);
    const { value, configVersion } = await deleteModelRoute(pool, request.params.alias, ifMatch);
    request.log.info({ alias: value.alias, routeId: value.id, configVersion }, 'model route deleted');
    return { deleted: value.alias, configVersion };
  });
};
