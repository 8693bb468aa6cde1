/**
 * The upstreams admin API (inside the /api/v1 admin scope): create, list, show, patch, delete.
 * The provider secret goes in, sealed, and never comes out: the view only says `hasApiKey`, logs
 * name fields explicitly (never the body), and validation messages never quote a value.
 */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { nameParam, parseConfigInput, refuseBodyFields } from '../config/config-fields.js';
import type { SecretBox } from '../crypto/secret-box.js';
import { zenovaError } from '../errors.js';
import { createUpstream, deleteUpstream, getUpstream, listUpstreams, patchUpstream } from '../upstreams/upstream-store.js';
import { upstreamCreateSchema, upstreamPatchSchema } from '../upstreams/upstream-validation.js';
import { toUpstreamView, upstreamEtag, upstreamViewSchema } from '../upstreams/upstream-view.js';
import { readIfMatch } from './if-match.js';
import { noQuerySchema } from './zod-schemas.js';
import type { ZodTypeProvider } from './zod-schemas.js';

const nameParams = z.object({ name: nameParam() });
const mutationReply = z.object({ upstream: upstreamViewSchema, configVersion: z.number() });

export const upstreamsRoutes: FastifyPluginAsync<{ pool: pg.Pool; secretBox: SecretBox | undefined }> = async (fastify, { pool, secretBox }) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  // Fail closed if this plugin is ever mounted outside the admin scope.
  app.addHook('preHandler', async (request) => {
    if (!request.principal) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED');
  });

  app.post('/upstreams', { schema: { response: { 201: mutationReply } } }, async (request, reply) => {
    const input = parseConfigInput(upstreamCreateSchema, request.body);
    const { value, configVersion } = await createUpstream(pool, secretBox, input);
    request.log.info({ upstream: value.name, upstreamId: value.id, kind: value.kind, hasApiKey: value.hasApiKey, configVersion }, 'upstream created');
    return reply.status(201).send({ upstream: toUpstreamView(value), configVersion });
  });

  app.get('/upstreams', {
    schema: { querystring: noQuerySchema, response: { 200: z.object({ upstreams: z.array(upstreamViewSchema) }) } },
  }, async () => ({ upstreams: (await listUpstreams(pool)).map(toUpstreamView) }));

  app.get('/upstreams/:name', {
    schema: { params: nameParams, response: { 200: upstreamViewSchema } },
  }, async (request, reply) => {
    const upstream = await getUpstream(pool, request.params.name);
    void reply.header('etag', upstreamEtag(upstream));
    return toUpstreamView(upstream);
  });

  app.patch('/upstreams/:name', { schema: { params: nameParams, response: { 200: mutationReply } } }, async (request, reply) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    const patch = parseConfigInput(upstreamPatchSchema, request.body);
    const { value, configVersion } = await patchUpstream(pool, secretBox, request.params.name, patch, ifMatch);
    request.log.info({ upstream: value.name, fields: Object.keys(patch), configVersion }, 'upstream changed');
    void reply.header('etag', upstreamEtag(value));
    return { upstream: toUpstreamView(value), configVersion };
  });

  app.delete('/upstreams/:name', {
    schema: { params: nameParams, response: { 200: z.object({ deleted: z.string(), configVersion: z.number() }) } },
  }, async (request) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    refuseBodyFields(request.body);
    const { value, configVersion } = await deleteUpstream(pool, request.params.name, ifMatch);
    request.log.info({ upstream: value.name, upstreamId: value.id, configVersion }, 'upstream deleted');
    return { deleted: value.name, configVersion };
  });
};
