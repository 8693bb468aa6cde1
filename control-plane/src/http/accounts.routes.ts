/** The accounts admin API (inside the /api/v1 admin scope): create, list (by name, in keyset pages), show, patch (an account by name or id, a name first, as billing's `{account}`). */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { createAccount, getAccount, listAccounts, patchAccount } from '../accounts/account-store.js';
import { accountCreateSchema, accountPatchSchema } from '../accounts/account-validation.js';
import { accountEtag, accountViewSchema, toAccountView } from '../accounts/account-view.js';
import { boundedText, nameParam, parseConfigInput } from '../config/config-fields.js';
import { zenovaError } from '../errors.js';
import { decodeNameCursor, encodeNameCursor, MAX_NAME_CURSOR_LENGTH, NOT_OUR_CURSOR } from './list-cursors.js';
import { readIfMatch } from './if-match.js';
import { listLimitSchema } from './zod-schemas.js';
import type { ZodTypeProvider } from './zod-schemas.js';

const nameParams = z.object({ name: nameParam() });
const mutationReply = z.object({ account: accountViewSchema, configVersion: z.number() });
export const DEFAULT_ACCOUNT_LIST_LIMIT = 1_000;
export const MAX_ACCOUNT_LIST_LIMIT = 10_000;
const listQuery = z.strictObject({
  limit: listLimitSchema(MAX_ACCOUNT_LIST_LIMIT, DEFAULT_ACCOUNT_LIST_LIMIT),
  cursor: boundedText(MAX_NAME_CURSOR_LENGTH).optional(),
});

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
    schema: { querystring: listQuery, response: { 200: z.object({ accounts: z.array(accountViewSchema), nextCursor: z.string().nullable() }) } },
  }, async (request) => {
    const q = request.query;
    const after = q.cursor === undefined ? undefined : decodeNameCursor(q.cursor);
    if (q.cursor !== undefined && after === undefined) throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', NOT_OUR_CURSOR);
    const { accounts, next } = await listAccounts(pool, { limit: q.limit, after });
    return { accounts: accounts.map(toAccountView), nextCursor: next === undefined ? null : encodeNameCursor(next) };
  });

  app.get('/accounts/:name', {
    schema: { params: nameParams, response: { 200: accountViewSchema } },
  }, async (request, reply) => {
    const account = await getAccount(pool, request.params.name);
    void reply.header('etag', accountEtag(account));
    return toAccountView(account);
  });

  app.patch('/accounts/:name', { schema: { params: nameParams, response: { 200: mutationReply } } }, async (request, reply) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    const patch = parseConfigInput(accountPatchSchema, request.body);
    const { value, configVersion } = await patchAccount(pool, request.params.name, patch, ifMatch);
    request.log.info({ account: value.name, fields: Object.keys(patch), configVersion }, 'account changed');
    void reply.header('etag', accountEtag(value));
    return { account: toAccountView(value), configVersion };
  });
};
