/**
 * The request records admin API (inside the /api/v1 admin scope): GET /requests/{requestId} and
 * GET /requests?node=&account=&keyId=&model=&status=&clientRequestId=&from=&to=&limit=&cursor= (newest
 * first, keyset pages). `node` is a live node's name or any node's id (a deleted node's records by its
 * id); `account` an account's name or id, as /leases?account= and /accounts/{account}/balance take it.
 * Records arrive from nodes by backfill (docs/spool.md), so a request shows up once its node has
 * delivered it; one the ingestion set aside never does, and its 404 says so.
 */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { recordStatusSchema } from '../../../proto/src/index.js';
import { findAccount } from '../billing/billing-views.js';
import { boundedText, nameParam } from '../config/config-fields.js';
import type { SecretBox } from '../crypto/secret-box.js';
import { zenovaError } from '../errors.js';
import { findNodeByNameOrId } from '../nodes/node-repository.js';
import { decodeCursor, encodeCursor, MAX_CURSOR_LENGTH } from '../records/record-cursor.js';
import { findSetAsideRecord, getRecord, listRecords } from '../records/record-queries.js';
import type { SetAsideRecord } from '../records/record-queries.js';
import { requestDetailSchema, requestSummarySchema, toRequestDetail, toRequestSummary } from '../records/record-view.js';
import { NOT_OUR_CURSOR } from './list-cursors.js';
import { checkWindowOrder, instantSchema, listLimitSchema } from './zod-schemas.js';
import type { ZodTypeProvider } from './zod-schemas.js';

export const DEFAULT_LIST_LIMIT = 50;
export const MAX_LIST_LIMIT = 500;

const listQuery = z.strictObject({
  node: boundedText(64).optional(),
  // An account's id (a UUID) follows the name rule too: a value neither could be is a 400.
  account: nameParam().optional(),
  keyId: boundedText(128).optional(),
  model: boundedText(256).optional(),
  status: recordStatusSchema.optional(),
  clientRequestId: boundedText(128).optional(),
  from: instantSchema.optional(),
  to: instantSchema.optional(),
  limit: listLimitSchema(MAX_LIST_LIMIT, DEFAULT_LIST_LIMIT),
  cursor: boundedText(MAX_CURSOR_LENGTH).optional(),
}).check(checkWindowOrder);

/** Where the record came from and why it was set aside: its reason code and detail, never its content. */
function setAsideMessage(r: SetAsideRecord): string {
  const node = r.nodeName === null ? `node ${r.nodeId}` : `node '${r.nodeName}' (${r.nodeId})`;
  const others = r.count > 1 ? ` (the latest of ${r.count} records of this id set aside)` : '';
  return `The record of this request id arrived from ${node} at ${r.receivedAt.toISOString()} and was set aside, not ingested${others}: `
    + `${r.reason} (${r.detail}). A record set aside is not listed or charged; operators find it in the control plane's `
    + 'rejected_request_records table (docs/spool.md, "Ingestion").';
}

export const requestsRoutes: FastifyPluginAsync<{ pool: pg.Pool; secretBox: SecretBox | undefined }> = async (fastify, { pool }) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  // Fail closed if this plugin is ever mounted outside the admin scope.
  app.addHook('preHandler', async (request) => {
    if (!request.principal) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED');
  });

  app.get('/requests/:requestId', {
    schema: { params: z.object({ requestId: boundedText(128) }), response: { 200: z.object({ request: requestDetailSchema }) } },
  }, async (request) => {
    const row = await getRecord(pool, request.params.requestId);
    if (row === undefined) {
      // A record set aside will never appear: say so, rather than "not delivered (yet)" for ever.
      const setAside = await findSetAsideRecord(pool, request.params.requestId);
      if (setAside !== undefined) throw zenovaError('ZN_ERR_CP_NOT_FOUND', setAsideMessage(setAside));
      throw zenovaError('ZN_ERR_CP_NOT_FOUND', 'No record of this request id (yet): records appear once the node that served the request has delivered them.');
    }
    return { request: toRequestDetail(row) };
  });

  app.get('/requests', {
    schema: {
      querystring: listQuery,
      response: { 200: z.object({ requests: z.array(requestSummarySchema), nextCursor: z.string().nullable() }) },
    },
  }, async (request) => {
    const q = request.query;
    const cursor = q.cursor === undefined ? undefined : decodeCursor(q.cursor);
    if (q.cursor !== undefined && cursor === undefined) throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', NOT_OUR_CURSOR);
    const node = q.node === undefined ? undefined : await findNodeByNameOrId(pool, q.node);
    if (q.node !== undefined && node === undefined) throw zenovaError('ZN_ERR_CP_NODE_NOT_FOUND', `No node named or with id '${q.node}' (a deleted node's records are listed by its id).`);
    const account = q.account === undefined ? undefined : await findAccount(pool, q.account);
    if (q.account !== undefined && account === undefined) throw zenovaError('ZN_ERR_CP_ACCOUNT_NOT_FOUND', `No account named or with id '${q.account}'.`);
    const { rows, next } = await listRecords(pool, {
      ...(node !== undefined ? { node } : {}),
      ...(account !== undefined ? { accountId: account.id } : {}),
      ...(q.keyId !== undefined ? { keyId: q.keyId } : {}),
      ...(q.model !== undefined ? { model: q.model } : {}),
      ...(q.status !== undefined ? { status: q.status } : {}),
      ...(q.clientRequestId !== undefined ? { clientRequestId: q.clientRequestId } : {}),
      ...(q.from !== undefined ? { from: q.from } : {}),
      ...(q.to !== undefined ? { to: q.to } : {}),
      ...(cursor !== undefined ? { cursor } : {}),
      limit: q.limit,
    });
    return { requests: rows.map(toRequestSummary), nextCursor: next === undefined ? null : encodeCursor(next) };
  });
};
