/**
 * The rate-limit and guardrail policies admin API (inside the /api/v1 admin scope): create, list,
 * show, replace, delete. A replace keeps the policy's id, so the accounts and keys using it keep using it.
 */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { nameParam, parseConfigInput, refuseBodyFields } from '../config/config-fields.js';
import { zenovaError } from '../errors.js';
import { createGuardrailPolicy, deleteGuardrailPolicy, getGuardrailPolicy, listGuardrailPolicies, replaceGuardrailPolicy } from '../policies/guardrail-policy-store.js';
import { guardrailPolicyCreateSchema, guardrailPolicyReplaceSchema } from '../policies/guardrail-policy-validation.js';
import { guardrailPolicyEtag, guardrailPolicyViewSchema, toGuardrailPolicyView } from '../policies/guardrail-policy-view.js';
import { createRateLimitPolicy, deleteRateLimitPolicy, getRateLimitPolicy, listRateLimitPolicies, replaceRateLimitPolicy } from '../policies/rate-limit-policy-store.js';
import { rateLimitPolicyCreateSchema, rateLimitPolicyReplaceSchema } from '../policies/rate-limit-policy-validation.js';
import { rateLimitPolicyEtag, rateLimitPolicyViewSchema, toRateLimitPolicyView } from '../policies/rate-limit-policy-view.js';
import { readIfMatch } from './if-match.js';
import { noQuerySchema } from './zod-schemas.js';
import type { ZodTypeProvider } from './zod-schemas.js';

const nameParams = z.object({ name: nameParam() });
const deletedReply = z.object({ deleted: z.string(), configVersion: z.number() });
const rateLimitReply = z.object({ policy: rateLimitPolicyViewSchema, configVersion: z.number() });
const guardrailReply = z.object({ policy: guardrailPolicyViewSchema, configVersion: z.number() });

export const policiesRoutes: FastifyPluginAsync<{ pool: pg.Pool }> = async (fastify, { pool }) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  // Fail closed if this plugin is ever mounted outside the admin scope.
  app.addHook('preHandler', async (request) => {
    if (!request.principal) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED');
  });

  app.post('/rate-limit-policies', {
    schema: { response: { 201: rateLimitReply } },
  }, async (request, reply) => {
    const input = parseConfigInput(rateLimitPolicyCreateSchema, request.body);
    const { value, configVersion } = await createRateLimitPolicy(pool, input);
    request.log.info({ policy: value.name, policyId: value.id, configVersion }, 'rate-limit policy created');
    return reply.status(201).send({ policy: toRateLimitPolicyView(value), configVersion });
  });

  app.get('/rate-limit-policies', {
    schema: { querystring: noQuerySchema, response: { 200: z.object({ policies: z.array(rateLimitPolicyViewSchema) }) } },
  }, async () => ({ policies: (await listRateLimitPolicies(pool)).map(toRateLimitPolicyView) }));

  app.get('/rate-limit-policies/:name', {
    schema: { params: nameParams, response: { 200: rateLimitPolicyViewSchema } },
  }, async (request, reply) => {
    const policy = await getRateLimitPolicy(pool, request.params.name);
    void reply.header('etag', rateLimitPolicyEtag(policy));
    return toRateLimitPolicyView(policy);
  });

  app.put('/rate-limit-policies/:name', {
    schema: { params: nameParams, response: { 200: rateLimitReply } },
  }, async (request, reply) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    const spec = parseConfigInput(rateLimitPolicyReplaceSchema, request.body);
    const { value, configVersion } = await replaceRateLimitPolicy(pool, request.params.name, spec, ifMatch);
    request.log.info({ policy: value.name, policyId: value.id, configVersion }, 'rate-limit policy replaced');
    void reply.header('etag', rateLimitPolicyEtag(value));
    return { policy: toRateLimitPolicyView(value), configVersion };
  });

  app.delete('/rate-limit-policies/:name', {
    schema: { params: nameParams, response: { 200: deletedReply } },
  }, async (request) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    refuseBodyFields(request.body);
    const { value, configVersion } = await deleteRateLimitPolicy(pool, request.params.name, ifMatch);
    request.log.info({ policy: value.name, policyId: value.id, configVersion }, 'rate-limit policy deleted');
    return { deleted: value.name, configVersion };
  });

  app.post('/guardrail-policies', {
    schema: { response: { 201: guardrailReply } },
  }, async (request, reply) => {
    const input = parseConfigInput(guardrailPolicyCreateSchema, request.body);
    const { value, configVersion } = await createGuardrailPolicy(pool, input);
    request.log.info({ policy: value.name, policyId: value.id, rules: value.rules.length, configVersion }, 'guardrail policy created');
    return reply.status(201).send({ policy: toGuardrailPolicyView(value), configVersion });
  });

  app.get('/guardrail-policies', {
    schema: { querystring: noQuerySchema, response: { 200: z.object({ policies: z.array(guardrailPolicyViewSchema) }) } },
  }, async () => ({ policies: (await listGuardrailPolicies(pool)).map(toGuardrailPolicyView) }));

  app.get('/guardrail-policies/:name', {
    schema: { params: nameParams, response: { 200: guardrailPolicyViewSchema } },
  }, async (request, reply) => {
    const policy = await getGuardrailPolicy(pool, request.params.name);
    void reply.header('etag', guardrailPolicyEtag(policy));
    return toGuardrailPolicyView(policy);
  });

  app.put('/guardrail-policies/:name', {
    schema: { params: nameParams, response: { 200: guardrailReply } },
  }, async (request, reply) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    const spec = parseConfigInput(guardrailPolicyReplaceSchema, request.body);
    const { value, configVersion } = await replaceGuardrailPolicy(pool, request.params.name, spec, ifMatch);
    request.log.info({ policy: value.name, policyId: value.id, rules: value.rules.length, configVersion }, 'guardrail policy replaced');
    void reply.header('etag', guardrailPolicyEtag(value));
    return { policy: toGuardrailPolicyView(value), configVersion };
  });

  app.delete('/guardrail-policies/:name', {
    schema: { params: nameParams, response: { 200: deletedReply } },
  }, async (request) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    refuseBodyFields(request.body);
    const { value, configVersion } = await deleteGuardrailPolicy(pool, request.params.name, ifMatch);
    request.log.info({ policy: value.name, policyId: value.id, configVersion }, 'guardrail policy deleted');
    return { deleted: value.name, configVersion };
  });
};
