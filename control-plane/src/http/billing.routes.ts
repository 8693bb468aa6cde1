/**
 * The billing admin API (inside the /api/v1 admin scope; docs/api.md "Billing"): top up an
 * account, its balance and leases, spend by account/key/node over a window, the leases of a node
 * or account (spend and leases in keyset pages: `limit`, `cursor`, `nextCursor`).
 * Accounts are named by name (as in /accounts) or id. Money is integer micro-units, never floats:
 * bigint through to the answer, written as exact JSON integers (a spend sum may pass 2^53).
 */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { creditAccount, creditReferenceUsed } from '../billing/account-credits.js';
import { decodeSpendCursor, encodeSpendCursor, MAX_SPEND_CURSOR_LENGTH } from '../billing/billing-cursors.js';
import { encodeNewestFirstCursor, MAX_NEWEST_FIRST_CURSOR_LENGTH, newestFirstCursorOf, NOT_OUR_CURSOR } from './list-cursors.js';
import type { SpendCursor } from '../billing/billing-cursors.js';
import { balanceView, balanceViewSchema, exactJson, findAccount, leaseViewSchema, listLeases, spendBy, spendRowSchema } from '../billing/billing-views.js';
import { bodyObject, boundedText, integerIn, nameParam, parseConfigInput, text } from '../config/config-fields.js';
import type { SecretBox } from '../crypto/secret-box.js';
import { zenovaError } from '../errors.js';
import { findNodeByNameOrId } from '../nodes/node-repository.js';
import { checkWindowOrder, instantSchema, listLimitSchema, windowOrderError } from './zod-schemas.js';
import type { ZodTypeProvider } from './zod-schemas.js';

// An account's id (a UUID) follows the name rule too.
const accountParams = z.object({ account: nameParam() });

const MAX_REFERENCE_CHARS = 256;
const CONTROL_CHARACTER = /\p{Cc}/u;
const DEFAULT_IGNORABLE = /\p{Default_Ignorable_Code_Point}/u;

/** Why a top-up's reference is refused whatever the ledger holds, or null: its length and its ends. */
function referenceShapeProblem(reference: string): string | null {
  if (reference.length > MAX_REFERENCE_CHARS || reference.normalize('NFC').length > MAX_REFERENCE_CHARS) return `must be at most ${MAX_REFERENCE_CHARS} characters`;
  if (!/^\S(?:.*\S)?$/s.test(reference)) return 'must not be empty or start or end with white space (leave it out or null for none)';
  return null;
}

/** Why a new top-up's reference (in NFC) is refused for what it holds, or null. */
function referenceCharacterProblem(reference: string): string | null {
  if (CONTROL_CHARACTER.test(reference)) return 'must not hold control characters (a line break, a tab)';
  if (DEFAULT_IGNORABLE.test(reference)) {
    return 'must not hold invisible characters (zero width spaces and joiners, soft hyphens, variation selectors: default-ignorable code points)';
  }
  return null;
}

const referenceRule = (problem: (reference: string) => string | null) =>
  text()
    .check((ctx) => {
      const found = problem(ctx.value);
      if (found !== null) ctx.issues.push({ code: 'custom', input: ctx.value, message: found });
    })
    .nullable().default(null);

// A reference is stored in NFC (as regions are, nodes/node-validation.ts), so `Café-1` sent composed
// or decomposed is one key; a retry is also matched as sent, so a top-up stored before that rule
// (as its client sent it) still replays. Otherwise compared exactly, so a blank one (a script's
// empty invoice field) would key every later blank top-up of that amount as a replay, "INV-1 " would
// differ from "INV-1", and "INV\u200B1" (an invisible character) or "INV\r\n1" from "INV1" without
// anyone seeing why: all refused for a new top-up (creditCharacters), though not for the retry of
// one stored before the rule.
const creditBody = bodyObject({
  amountMicros: integerIn(1, Number.MAX_SAFE_INTEGER),
  reference: referenceRule(referenceShapeProblem),
});
const creditCharacters = bodyObject({
  amountMicros: integerIn(1, Number.MAX_SAFE_INTEGER),
  reference: referenceRule((reference) => referenceCharacterProblem(reference.normalize('NFC'))),
});

const DAY_MS = 24 * 3600 * 1000;
const EARLIEST_MS = Date.parse('0001-01-01T00:00:00Z');

export const DEFAULT_SPEND_LIMIT = 1_000;
export const MAX_SPEND_LIMIT = 10_000;
export const DEFAULT_LEASE_LIMIT = 100;
/** Also how many leases an account's balance shows at most (newest first). */
export const MAX_LEASE_LIMIT = 1_000;

const spendQuery = z.strictObject({
  // No default here: with a cursor, an absent `by` is the cursor's.
  by: z.enum(['account', 'key', 'node']).optional(),
  from: instantSchema.optional(),
  to: instantSchema.optional(),
  limit: listLimitSchema(MAX_SPEND_LIMIT, DEFAULT_SPEND_LIMIT),
  cursor: boundedText(MAX_SPEND_CURSOR_LENGTH).optional(),
}).check(checkWindowOrder);

const leasesQuery = z.strictObject({
  node: boundedText(64).optional(),
  account: boundedText(128).optional(),
  limit: listLimitSchema(MAX_LEASE_LIMIT, DEFAULT_LEASE_LIMIT),
  cursor: boundedText(MAX_NEWEST_FIRST_CURSOR_LENGTH).optional(),
});


/**
 * The grouping and window of a next page are its cursor's: a first page without `to` ends "now",
 * which moves on before the next page is asked for. Given again, they must be the same.
 */
function spendCursorOf(text: string, q: { by?: string | undefined; from?: number | undefined; to?: number | undefined }): SpendCursor {
  const cursor = decodeSpendCursor(text);
  if (cursor === undefined) throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', NOT_OUR_CURSOR);
  if ((q.by !== undefined && q.by !== cursor.by) || (q.from !== undefined && q.from !== cursor.fromMs) || (q.to !== undefined && q.to !== cursor.toMs)) {
    throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', "cursor: from a query with another 'by', 'from' or 'to' (send the first page's, or leave them out)");
  }
  return cursor;
}

export const billingRoutes: FastifyPluginAsync<{ pool: pg.Pool; secretBox: SecretBox | undefined }> = async (fastify, { pool }) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  // The answers' amounts are bigints: checked by their zod schemas as everywhere, then written with
  // exactJson, since JSON.stringify throws on a bigint and a number past 2^53 would be rounded.
  app.setSerializerCompiler(({ schema, method, url, httpStatus }) => {
    if (!(schema instanceof z.ZodType)) throw new Error(`${method} ${url} response ${httpStatus ?? ''}: route schemas must be zod schemas`);
    return (data: unknown) => exactJson(schema.parse(data)) ?? 'null';
  });
  // Fail closed if this plugin is ever mounted outside the admin scope.
  app.addHook('preHandler', async (request) => {
    if (!request.principal) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED');
  });

  const accountOf = async (nameOrId: string): Promise<{ id: string; name: string }> => {
    const account = await findAccount(pool, nameOrId);
    if (account === undefined) throw zenovaError('ZN_ERR_CP_ACCOUNT_NOT_FOUND', `No account named or with id '${nameOrId}'.`);
    return account;
  };

  // A retry of a top-up (same reference and amount) is answered 200 with the balance as it is now.
  const creditAnswer = z.object({ balance: balanceViewSchema, replayed: z.boolean() });
  app.post('/accounts/:account/credits', {
    schema: { params: accountParams, response: { 200: creditAnswer, 201: creditAnswer } },
  }, async (request, reply) => {
    const input = parseConfigInput(creditBody, request.body);
    const account = await accountOf(request.params.account);
    const asSent = input.reference;
    const reference = asSent?.normalize('NFC') ?? null;
    // Refused only when it would be a new key: a retry of a top-up stored before the rule replays.
    if (asSent !== null && reference !== null && referenceCharacterProblem(reference) !== null && !(await creditReferenceUsed(pool, account.id, asSent))) {
      parseConfigInput(creditCharacters, request.body);
    }
    const { replayed } = await creditAccount(pool, account.id, BigInt(input.amountMicros), reference, asSent ?? undefined);
    request.log.info({ accountId: account.id, amountMicros: input.amountMicros, replayed }, replayed ? 'account top-up replayed' : 'account credited');
    return reply.code(replayed ? 200 : 201).send({ balance: await balanceView(pool, account), replayed });
  });

  app.get('/accounts/:account/balance', {
    schema: {
      params: accountParams,
      response: { 200: z.object({ balance: balanceViewSchema, leases: z.array(leaseViewSchema), leasesTruncated: z.boolean() }) },
    },
  }, async (request) => {
    const account = await accountOf(request.params.account);
    // The balance's figures are over all the account's leases; the list is the newest, and the rest
    // are paged by /leases?account=.
    const { leases, next } = await listLeases(pool, { accountId: account.id, limit: MAX_LEASE_LIMIT });
    return { balance: await balanceView(pool, account), leases, leasesTruncated: next !== undefined };
  });

  app.get('/spend', {
    schema: {
      querystring: spendQuery,
      response: { 200: z.object({ by: z.string(), from: z.string(), to: z.string(), rows: z.array(spendRowSchema), nextCursor: z.string().nullable() }) },
    },
  }, async (request) => {
    const q = request.query;
    const cursor = q.cursor === undefined ? undefined : spendCursorOf(q.cursor, q);
    const by = cursor?.by ?? q.by ?? 'account';
    const to = cursor !== undefined ? new Date(cursor.toMs) : q.to === undefined ? new Date() : new Date(q.to);
    // The schema checks the order when both are given; a `to` of now comes after it.
    // The default window starts 30 days before `to`, but not before year 1 (the range every time keeps to).
    const from = cursor !== undefined ? new Date(cursor.fromMs) : q.from === undefined ? new Date(Math.max(EARLIEST_MS, to.getTime() - 30 * DAY_MS)) : new Date(q.from);
    if (from >= to) throw windowOrderError();
    const { rows, next } = await spendBy(pool, by, from, to, { limit: q.limit, cursor });
    return { by, from: from.toISOString(), to: to.toISOString(), rows, nextCursor: next === undefined ? null : encodeSpendCursor(next) };
  });

  app.get('/leases', {
    schema: {
      querystring: leasesQuery,
      response: { 200: z.object({ leases: z.array(leaseViewSchema), nextCursor: z.string().nullable() }) },
    },
  }, async (request) => {
    const q = request.query;
    const cursor = q.cursor === undefined ? undefined : newestFirstCursorOf('leases', q.cursor);
    let nodeId: string | undefined;
    if (q.node !== undefined) {
      const node = await findNodeByNameOrId(pool, q.node);
      if (!node) throw zenovaError('ZN_ERR_CP_NODE_NOT_FOUND', `No node named or with id '${q.node}'.`);
      nodeId = node.id;
    }
    const accountId = q.account === undefined ? undefined : (await accountOf(q.account)).id;
    const { leases, next } = await listLeases(pool, { nodeId, accountId, limit: q.limit, cursor });
    return { leases, nextCursor: next === undefined ? null : encodeNewestFirstCursor('leases', next) };
  });
};
