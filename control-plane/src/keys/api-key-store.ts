/**
 * API keys in PostgreSQL: create (the secret is generated here and returned once; only its hash is
 * stored), list, find, revoke. The account (by name or id) and policies are named in the body and
 * looked up under share locks; the unknown ones are one 400 naming each field. Every write records
 * a config version.
 */
import type pg from 'pg';
import { findAccount } from '../billing/billing-views.js';
import { UUID_PATTERN } from '../billing/ledger.js';
import { throwProblems } from '../config/config-fields.js';
import { withConfigChange } from '../config/config-store.js';
import type { ConfigMutationResult } from '../config/config-store.js';
import { zenovaError } from '../errors.js';
import { afterNewestFirstCursorSql, createdAtUsSql } from '../http/list-cursors.js';
import type { NewestFirstCursor } from '../http/list-cursors.js';
import type { Queryable } from '../nodes/with-transaction.js';
import { lockGuardrailPolicyByName } from '../policies/guardrail-policy-store.js';
import { lockRateLimitPolicyByName } from '../policies/rate-limit-policy-store.js';
import { API_KEY_CREATE_ROUTE, IdempotentReplayError, claimIdempotencyKey, completeIdempotencyClaim, sweepExpiredIdempotencyKeys } from './api-key-idempotency.js';
import type { IdempotencyClaim } from './api-key-idempotency.js';
import { generateApiKeySecret } from './api-key-secret.js';
import { isApiKeyId } from './api-key-validation.js';
import type { ApiKeyCreateInput } from './api-key-validation.js';
import { API_KEY_STATUS_SQL } from './api-key-view.js';
import type { ApiKeyRow } from './api-key-view.js';

const SELECT = `select k.id, a.name as account, k.name, k.key_prefix as prefix, k.allowed_models as "allowedModels",
    k.allowed_tool_servers as "allowedToolServers", k.expires_at as "expiresAt",
    ${API_KEY_STATUS_SQL} as status,
    r.name as "rateLimitPolicy", g.name as "guardrailPolicy", k.created_at as "createdAt", k.revoked_at as "revokedAt"
  from api_keys k
  join accounts a on a.id = k.account_id
  left join rate_limit_policies r on r.id = k.rate_limit_policy_id and r.deleted_at is null
  left join guardrail_policies g on g.id = k.guardrail_policy_id and g.deleted_at is null`;

/** The key's created_at to the microsecond too, for the list's cursor. */
const SELECT_WITH_CREATED_US = SELECT.replace(' from api_keys k', `, ${createdAtUsSql('k.created_at')} as "createdUs"\n  from api_keys k`);

function notFound(id: string): Error {
  // The id is echoed only when it has the shape of one: a path may carry anything.
  return zenovaError('ZN_ERR_CP_API_KEY_NOT_FOUND', isApiKeyId(id) ? `No API key with id '${id}'.` : undefined);
}

async function selectById(db: Queryable, id: string): Promise<ApiKeyRow | undefined> {
  const { rows } = await db.query<ApiKeyRow>(`${SELECT} where k.id = $1`, [id]);
  return rows[0];
}

/**
 * The live account named `nameOrId`, else the one with that id (findAccount's rule), share-locked by
 * id until the caller's transaction ends; undefined when none. An account is never renamed, but it
 * may have been deleted between finding and locking it: only a live one is locked.
 */
async function lockLiveAccount(client: pg.PoolClient, nameOrId: string): Promise<{ id: string } | undefined> {
  const found = await findAccount(client, nameOrId);
  if (found === undefined) return undefined;
  const { rows } = await client.query<{ id: string }>('select id from accounts where id = $1 and deleted_at is null for share', [found.id]);
  return rows[0];
}

/**
 * With `idempotency` (the request's Idempotency-Key, api-key-idempotency.ts), the key is claimed
 * first, before the account or policies are looked up: a retry of a create that already ran throws
 * IdempotentReplayError naming the key it created, whatever has changed since, and creates nothing.
 */
export async function createApiKey(
  pool: pg.Pool, input: ApiKeyCreateInput, idempotency?: IdempotencyClaim,
): Promise<ConfigMutationResult<{ apiKey: ApiKeyRow; secret: string }>> {
  const result = await withConfigChange<{ apiKey: ApiKeyRow; secret: string }>(pool, async (client) => {
    if (idempotency !== undefined) {
      const claim = await claimIdempotencyKey(client, API_KEY_CREATE_ROUTE, idempotency);
      if (!claim.claimed) throw new IdempotentReplayError((await selectById(client, claim.resourceId))!);
    }
    // Every reference is looked up before any is refused: one 400 names each unknown one. The
    // account is a name or an id, a name first, as `GET /api-keys?account=` takes it.
    const account = await lockLiveAccount(client, input.account);
    const rateLimitPolicy = input.rateLimitPolicy == null ? null : await lockRateLimitPolicyByName(client, input.rateLimitPolicy);
    const guardrailPolicy = input.guardrailPolicy == null ? null : await lockGuardrailPolicyByName(client, input.guardrailPolicy);
    throwProblems([
      ...(account ? [] : [{ field: 'account', rule: `no account named ${UUID_PATTERN.test(input.account) ? 'or with id ' : ''}'${input.account}'` }]),
      ...(rateLimitPolicy === undefined ? [{ field: 'rateLimitPolicy', rule: `no rate-limit policy named '${input.rateLimitPolicy}'` }] : []),
      ...(guardrailPolicy === undefined ? [{ field: 'guardrailPolicy', rule: `no guardrail policy named '${input.guardrailPolicy}'` }] : []),
    ]);
    const accountId = account!.id; // refused above when missing
    const rateLimitPolicyId = rateLimitPolicy?.id ?? null;
    const guardrailPolicyId = guardrailPolicy?.id ?? null;
    const generated = generateApiKeySecret();
    const { rows } = await client.query<{ id: string }>(
      `insert into api_keys (account_id, name, key_hash, key_prefix, allowed_models, allowed_tool_servers, expires_at,
                             rate_limit_policy_id, guardrail_policy_id)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9) returning id`,
      [accountId, input.name, generated.hash, generated.prefix, input.allowedModels ?? null, input.allowedToolServers ?? null,
        input.expiresAt ?? null, rateLimitPolicyId, guardrailPolicyId],
    );
    const apiKey = (await selectById(client, rows[0]!.id))!;
    if (idempotency !== undefined) await completeIdempotencyClaim(client, API_KEY_CREATE_ROUTE, idempotency, apiKey.id);
    return { value: { apiKey, secret: generated.secret }, change: { entity: 'api-key', entityId: apiKey.id, action: 'create' } };
  });
  // Housekeeping after the commit; a failure here must not turn a created key into an error.
  if (idempotency !== undefined) await sweepExpiredIdempotencyKeys(pool).catch(() => undefined);
  return result;
}

/** Every key (active, expired and revoked), newest first; only the named live account's when `account` is given. */
export interface ApiKeyListFilter {
  /** An account's id: only its keys. */
  accountId?: string | undefined;
  limit: number;
  cursor?: NewestFirstCursor | undefined;
}

/**
 * The key list's SQL (apart from running it, so a test can read its plan): live accounts' keys,
 * newest first, (created_at, id) descending, a range of migration 0017's indexes from the cursor.
 */
export function listApiKeysQuery(filter: ApiKeyListFilter): { text: string; values: unknown[] } {
  const where = ['a.deleted_at is null'];
  const values: unknown[] = [];
  if (filter.accountId !== undefined) where.push(`k.account_id = $${values.push(filter.accountId)}::uuid`);
  if (filter.cursor !== undefined) where.push(afterNewestFirstCursorSql('k.created_at', 'k.id', filter.cursor, values));
  return {
    text: `${SELECT_WITH_CREATED_US} where ${where.join(' and ')} order by k.created_at desc, k.id desc limit $${values.push(filter.limit + 1)}`,
    values,
  };
}

/** One page of keys (expired and revoked ones included), of all live accounts or the one named (or with that id); `next` when more follow. */
export async function listApiKeys(
  db: Queryable, filter: { account?: string | undefined; limit: number; cursor?: NewestFirstCursor | undefined },
): Promise<{ keys: ApiKeyRow[]; next: NewestFirstCursor | undefined }> {
  let accountId: string | undefined;
  if (filter.account !== undefined) {
    // A name or an id, a name first, as the billing routes and /requests?account= take it.
    const account = await findAccount(db, filter.account);
    if (account === undefined) throw zenovaError('ZN_ERR_CP_ACCOUNT_NOT_FOUND', `No account named or with id '${filter.account}'.`);
    accountId = account.id;
  }
  const { rows } = await db.query<ApiKeyRow & { createdUs: string }>(listApiKeysQuery({ accountId, limit: filter.limit, cursor: filter.cursor }));
  const page = rows.slice(0, filter.limit);
  const last = page.at(-1);
  const next = rows.length > filter.limit && last !== undefined ? { createdAtUs: BigInt(last.createdUs), id: last.id } : undefined;
  return { keys: page.map(({ createdUs: _, ...key }) => key), next };
}

export async function getApiKey(db: Queryable, id: string): Promise<ApiKeyRow> {
  const key = isApiKeyId(id) ? await selectById(db, id) : undefined;
  if (!key) throw notFound(id);
  return key;
}

/** Revokes the key; revoking a revoked key changes nothing and records no version. */
export async function revokeApiKey(pool: pg.Pool, id: string): Promise<ConfigMutationResult<ApiKeyRow>> {
  if (!isApiKeyId(id)) throw notFound(id);
  return withConfigChange(pool, async (client) => {
    const { rows } = await client.query<{ status: string }>('select status from api_keys where id = $1 for update', [id]);
    const current = rows[0];
    if (!current) throw notFound(id);
    if (current.status === 'revoked') return { value: (await selectById(client, id))!, change: null };
    await client.query(`update api_keys set status = 'revoked', revoked_at = now() where id = $1`, [id]);
    return { value: (await selectById(client, id))!, change: { entity: 'api-key', entityId: id, action: 'revoke' } };
  });
}
