/** The accounts admin API (inside the /api/v1 admin scope): create, list, show, patch. */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { createAccount, getAccount, listAccounts, patchAccount } from '../accounts/account-store.js';
import { accountCreateSchema, accountPatchSchema } from '../accounts/account-validation.js';
import { accountViewSchema, toAccountView } from '../accounts/account-view.js';
import { nameParam, parseConfigInput } from '../config/config-fields.js';
import { zenovaError } from '../errors.js';
import { noQuerySchema } from './zod-schemas.js';
import type { ZodTypeProvider } from './zod-schemas.js';

const nameParams = z.object({ name: nameParam() });
const mutationReply = z.object({ account: accountViewSchema, configVersion: z.number() });

export const accountsRoutes: FastifyPluginAsync<{ pool: pg.Pool }> = async (fastify, { pool }) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  // Fail closed if this plugin is ever mounted outside the admin scope.
  app.addHook('preHandler', async (request) => {
    if (!request.principal) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED');
  });

  app.post('/accounts', { schema: { response: { 201: mutationReply } } }, async (request, reply) => {
    const input = parseConfigInput(accountCreateSchema, request.body);
    const { value, configVersion } = await createAccount(pool, input);
    request.log.info({ account: value.name, accountId: value.id, configVersion }, 'account created');
    return reply.status(201).send({ account: toAccountView(value), configVersion });
  });

  app.get('/accounts', {
    schema: { querystring: noQuerySchema, response: { 200: z.object({ accounts: z.array(accountViewSchema) }) } },
  }, async () => ({ accounts: (await listAccounts(pool)).map(toAccountView) }));

  app.get('/accounts/:name', {
    schema: { params: nameParams, response: { 200: accountViewSchema } },
  }, async (request) => toAccountView(await getAccount(pool, request.params.name)));

  app.patch('/accounts/:name', { schema: { params: nameParams, response: { 200: mutationReply } } }, async (request) => {
    const patch = parseConfigInput(accountPatchSchema, request.body);
    const { value, configVersion } = await patchAccount(pool, request.params.name, patch);
    request.log.info({ account: value.name, fields: Object.keys(patch), configVersion }, 'account changed');
    return { account: toAccountView(value), configVersion };
  });
};
