/**
 * The API keys admin API (inside the /api/v1 admin scope): create (the secret is in this one
 * answer and nowhere else), list (newest first, in keyset pages), show, revoke. The view schema has no field for a secret or hash.
 */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { boundedText, parseConfigInput, refuseBodyFields } from '../config/config-fields.js';
import { zenovaError } from '../errors.js';
import { IdempotentReplayError, idempotencyClaimOf } from '../keys/api-key-idempotency.js';
import { createApiKey, getApiKey, listApiKeys, revokeApiKey } from '../keys/api-key-store.js';
import { apiKeyCreateSchema, apiKeyListQuerySchema } from '../keys/api-key-validation.js';
import { apiKeyViewSchema, toApiKeyView } from '../keys/api-key-view.js';
import { encodeNewestFirstCursor, newestFirstCursorOf } from './list-cursors.js';
import type { ZodTypeProvider } from './zod-schemas.js';

const idParams = z.object({ id: boundedText(64) });

/**
 * A create's 409s: the error body, and with ZN_ERR_CP_IDEMPOTENT_REPLAY the key the first request
 * with that Idempotency-Key created (its view: never the secret, which was in that answer only).
 */
const conflictAnswer = z.object({
  error: z.object({ message: z.string(), type: z.string(), param: z.string().nullable(), code: z.string() }),
  apiKey: apiKeyViewSchema.optional(),
});

export const apiKeysRoutes: FastifyPluginAsync<{ pool: pg.Pool }> = async (fastify, { pool }) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  // Fail closed if this plugin is ever mounted outside the admin scope.
  app.addHook('preHandler', async (request) => {
    if (!request.principal) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED');
  });

  app.post('/api-keys', {
    schema: { response: { 201: z.object({ apiKey: apiKeyViewSchema, secret: z.string(), configVersion: z.number() }), 409: conflictAnswer } },
  }, async (request, reply) => {
    const input = parseConfigInput(apiKeyCreateSchema, request.body);
    // An Idempotency-Key makes a retry of a create whose answer was lost create nothing: it is
    // answered 409 naming the key created first (whose secret cannot be shown again).
    const idempotency = idempotencyClaimOf(request, request.body);
    let created;
    try {
      created = await createApiKey(pool, input, idempotency);
    } catch (err) {
      if (!(err instanceof IdempotentReplayError)) throw err;
      request.log.info({ code: err.code, apiKeyId: err.apiKey.id }, 'API key create replayed: nothing created');
      return reply.status(409).send({ ...err.toBody(), apiKey: toApiKeyView(err.apiKey) });
    }
    const { value, configVersion } = created;
    request.log.info({ apiKeyId: value.apiKey.id, account: value.apiKey.account, prefix: value.apiKey.prefix, configVersion }, 'API key created');
    return reply.status(201).send({ apiKey: toApiKeyView(value.apiKey), secret: value.secret, configVersion });
  });

  app.get('/api-keys', {
    schema: { querystring: apiKeyListQuerySchema, response: { 200: z.object({ apiKeys: z.array(apiKeyViewSchema), nextCursor: z.string().nullable() }) } },
  }, async (request) => {
    const q = request.query;
    const cursor = q.cursor === undefined ? undefined : newestFirstCursorOf('api-keys', q.cursor);
    const { keys, next } = await listApiKeys(pool, { account: q.account, limit: q.limit, cursor });
    return { apiKeys: keys.map(toApiKeyView), nextCursor: next === undefined ? null : encodeNewestFirstCursor('api-keys', next) };
  });

  app.get('/api-keys/:id', {
    schema: { params: idParams, response: { 200: apiKeyViewSchema } },
  }, async (request) => toApiKeyView(await getApiKey(pool, request.params.id)));

  app.post('/api-keys/:id/revoke', {
    schema: { params: idParams, response: { 200: z.object({ apiKey: apiKeyViewSchema, configVersion: z.number() }) } },
  }, async (request) => {
    refuseBodyFields(request.body);
    const { value, configVersion } = await revokeApiKey(pool, request.params.id);
    request.log.info({ apiKeyId: value.id, account: value.account, configVersion }, 'API key revoked');
    return { apiKey: toApiKeyView(value), configVersion };
  });
};
