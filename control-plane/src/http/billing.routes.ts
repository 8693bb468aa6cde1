/**
 * The billing admin API (inside the /api/v1 admin scope; docs/api.md "Billing"): top up an
 * account, its balance and leases, spend by account/key/node over a window, the leases of a node.
 * Accounts are named by name (as in /accounts) or id. Money is integer micro-units, never floats.
 */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { creditAccount } from '../billing/account-credits.js';
import { balanceView, balanceViewSchema, findAccount, leaseViewSchema, listLeases, spendBy, spendRowSchema } from '../billing/billing-views.js';
import { bodyObject, boundedText, integerIn, nameParam, parseConfigInput, text } from '../config/config-fields.js';
import type { SecretBox } from '../crypto/secret-box.js';
import { zenovaError } from '../errors.js';
import { findNodeByNameOrId } from '../nodes/node-repository.js';
import { checkWindowOrder, instantSchema, windowOrderError } from './zod-schemas.js';
import type { ZodTypeProvider } from './zod-schemas.js';

// An account's id (a UUID) follows the name rule too.
const accountParams = z.object({ account: nameParam() });

const creditBody = bodyObject({
  amountMicros: integerIn(1, Number.MAX_SAFE_INTEGER),
  reference: text().max(256, { error: () => 'must be at most 256 characters' }).nullable().default(null),
});

const DAY_MS = 24 * 3600 * 1000;


export const billingRoutes: FastifyPluginAsync<{ pool: pg.Pool; secretBox: SecretBox | undefined }> = async (fastify, { pool }) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  // Fail closed if this plugin is ever mounted outside the admin scope.
  app.addHook('preHandler', async (request) => {
    if (!request.principal) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED');
  });

  const accountOf = async (nameOrId: string): Promise<{ id: string; name: string }> => {
    const account = await findAccount(pool, nameOrId);
    if (account === undefined) throw zenovaError('ZN_ERR_CP_ACCOUNT_NOT_FOUND', `No account named '${nameOrId}'.`);
    return account;
  };

  app.post('/accounts/:account/credits', {
    schema: { params: accountParams, response: { 201: z.object({ balance: balanceViewSchema }) } },
  }, async (request, reply) => {
    const input = parseConfigInput(creditBody, request.body);
    const account = await accountOf(request.params.account);
    await creditAccount(pool, account.id, BigInt(input.amountMicros), input.reference);
    request.log.info({ accountId: account.id, amountMicros: input.amountMicros }, 'account credited');
    return reply.code(201).send({ balance: await balanceView(pool, account) });
  });

  app.get('/accounts/:account/balance', {
    schema: { params: accountParams, response: { 200: z.object({ balance: balanceViewSchema, leases: z.array(leaseViewSchema) }) } },
  }, async (request) => {
    const account = await accountOf(request.params.account);
    return { balance: await balanceView(pool, account), leases: await listLeases(pool, { accountId: account.id }) };
  });

  app.get('/spend', {
    schema: {
      querystring: z.strictObject({ by: z.enum(['account', 'key', 'node']).default('account'), from: instantSchema.optional(), to: instantSchema.optional() }).check(checkWindowOrder),
      response: { 200: z.object({ by: z.string(), from: z.string(), to: z.string(), rows: z.array(spendRowSchema) }) },
    },
  }, async (request) => {
    const to = request.query.to === undefined ? new Date() : new Date(request.query.to);
    // The schema checks the order when both are given; a `to` of now comes after it.
    const from = request.query.from === undefined ? new Date(to.getTime() - 30 * DAY_MS) : new Date(request.query.from);
    if (from >= to) throw windowOrderError();
    const rows = await spendBy(pool, request.query.by, from, to);
    return { by: request.query.by, from: from.toISOString(), to: to.toISOString(), rows };
  });

  app.get('/leases', {
    schema: {
      querystring: z.strictObject({ node: boundedText(64).optional() }),
      response: { 200: z.object({ leases: z.array(leaseViewSchema) }) },
    },
  }, async (request) => {
    let nodeId: string | undefined;
    if (request.query.node !== undefined) {
      const node = await findNodeByNameOrId(pool, request.query.node);
      if (!node) throw zenovaError('ZN_ERR_CP_NODE_NOT_FOUND', `No node named '${request.query.node}'.`);
      nodeId = node.id;
    }
    return { leases: await listLeases(pool, { nodeId }) };
  });
};
