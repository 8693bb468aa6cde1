/**
 * Rate-limit policies in PostgreSQL: create, list, replace (its limits, keeping its id, so the
 * accounts and keys that name it keep it), delete (refused while a live account or an active key
 * uses the policy), and the locked look-up accounts and keys use to attach one. Every write that
 * changes something records a config version in its transaction; a replace that leaves the limits
 * as they are records none.
 */
import type pg from 'pg';
import { withConfigChange, isUniqueViolation } from '../config/config-store.js';
import type { ConfigMutationResult } from '../config/config-store.js';
import { zenovaError } from '../errors.js';
import { checkIfMatch } from '../http/if-match.js';
import type { IfMatch } from '../http/if-match.js';
import { API_KEY_IN_USE_SQL } from '../keys/api-key-view.js';
import type { Queryable } from '../nodes/with-transaction.js';
import type { RateLimitPolicyInput, RateLimitPolicySpec } from './rate-limit-policy-validation.js';
import { rateLimitPolicyEtag } from './rate-limit-policy-view.js';
import type { RateLimitPolicyRow } from './rate-limit-policy-view.js';

const COLUMNS = `id, name, requests_per_minute as "requestsPerMinute", tokens_per_minute::text as "tokensPerMinute",
  concurrent_requests as "concurrentRequests", created_at as "createdAt"`;

export async function createRateLimitPolicy(pool: pg.Pool, input: RateLimitPolicyInput): Promise<ConfigMutationResult<RateLimitPolicyRow>> {
  try {
    return await withConfigChange(pool, async (client) => {
      const { rows } = await client.query<RateLimitPolicyRow>(
        `insert into rate_limit_policies (name, requests_per_minute, tokens_per_minute, concurrent_requests)
         values ($1, $2, $3, $4) returning ${COLUMNS}`,
        [input.name, input.requestsPerMinute ?? null, input.tokensPerMinute ?? null, input.concurrentRequests ?? null],
      );
      const policy = rows[0]!;
      return { value: policy, change: { entity: 'rate-limit-policy', entityId: policy.id, action: 'create' } };
    });
  } catch (err) {
    if (isUniqueViolation(err)) {
      throw zenovaError('ZN_ERR_CP_NAME_TAKEN', `name: a rate-limit policy named '${input.name}' already exists`);
    }
    throw err;
  }
}

export async function listRateLimitPolicies(db: Queryable): Promise<RateLimitPolicyRow[]> {
  const { rows } = await db.query<RateLimitPolicyRow>(`select ${COLUMNS} from rate_limit_policies where deleted_at is null order by name`);
  return rows;
}

/**
 * The live policy of that name, share-locked until the caller's transaction ends, so a concurrent
 * delete either waits for the caller's reference to commit (and then sees it) or wins first (and
 * the caller sees no policy).
 */
export async function lockRateLimitPolicyByName(client: pg.PoolClient, name: string): Promise<{ id: string } | undefined> {
  const { rows } = await client.query<{ id: string }>(
    'select id from rate_limit_policies where name = $1 and deleted_at is null for share',
    [name],
  );
  return rows[0];
}

function notFound(name: string): Error {
  return zenovaError('ZN_ERR_CP_POLICY_NOT_FOUND', `No rate-limit policy named '${name}'.`);
}

/**
 * The bytes the policy's limits add to every account and key entry that uses it, as the bundle
 * writes them (nulls left out) and config-limits.ts counts them.
 */
function limitsBytes(row: RateLimitPolicyRow): number {
  const limits: Record<string, number> = {};
  if (row.requestsPerMinute !== null) limits.requestsPerMinute = row.requestsPerMinute;
  if (row.tokensPerMinute !== null) limits.tokensPerMinute = Number(row.tokensPerMinute);
  if (row.concurrentRequests !== null) limits.concurrentRequests = row.concurrentRequests;
  return JSON.stringify(limits).length;
}

/** The live policy of that name. */
export async function getRateLimitPolicy(db: Queryable, name: string): Promise<RateLimitPolicyRow> {
  const { rows } = await db.query<RateLimitPolicyRow>(`select ${COLUMNS} from rate_limit_policies where name = $1 and deleted_at is null`, [name]);
  if (!rows[0]) throw notFound(name);
  return rows[0];
}

export async function replaceRateLimitPolicy(
  pool: pg.Pool, name: string, spec: RateLimitPolicySpec, ifMatch?: IfMatch,
): Promise<ConfigMutationResult<RateLimitPolicyRow>> {
  return withConfigChange(pool, async (client) => {
    // Row-locked as a delete locks it: a concurrent replace or delete waits for this commit and
    // then sees what it left (the new limits, or no policy: a 404).
    const { rows: found } = await client.query<RateLimitPolicyRow>(
      `select ${COLUMNS} from rate_limit_policies where name = $1 and deleted_at is null for update`,
      [name],
    );
    const current = found[0];
    if (current === undefined) throw notFound(name);
    // Under the row lock until commit: a writer holding the same ETag waits here and is refused.
    checkIfMatch(ifMatch, rateLimitPolicyEtag(current));
    // A limit left out is no limit of that kind (a replace, not a patch); the same limits again
    // change nothing and record no version.
    const { rows } = await client.query<RateLimitPolicyRow>(
      `update rate_limit_policies set requests_per_minute = $2, tokens_per_minute = $3, concurrent_requests = $4
        where id = $1
          and (requests_per_minute, tokens_per_minute, concurrent_requests) is distinct from ($2::integer, $3::bigint, $4::integer)
        returning ${COLUMNS}`,
      [current.id, spec.requestsPerMinute ?? null, spec.tokensPerMinute ?? null, spec.concurrentRequests ?? null],
    );
    const replaced = rows[0];
    if (replaced === undefined) return { value: current, change: null };
    return {
      value: replaced,
      change: { entity: 'rate-limit-policy', entityId: current.id, action: 'update' },
      // The limits are copied into every account and key using the policy: longer ones can take
      // the bundle past its size (shorter ones never do, and are never refused).
      grows: limitsBytes(replaced) > limitsBytes(current),
    };
  });
}

export async function deleteRateLimitPolicy(pool: pg.Pool, name: string, ifMatch?: IfMatch): Promise<ConfigMutationResult<RateLimitPolicyRow>> {
  return withConfigChange(pool, async (client) => {
    const { rows } = await client.query<RateLimitPolicyRow>(
      `select ${COLUMNS} from rate_limit_policies where name = $1 and deleted_at is null for update`,
      [name],
    );
    const policy = rows[0];
    if (!policy) throw notFound(name);
    // Under the row lock until commit: an edit or delete holding the same ETag waits here and is refused.
    checkIfMatch(ifMatch, rateLimitPolicyEtag(policy));
    const { rows: usage } = await client.query<{ accounts: number; keys: number }>(
      `select (select count(*)::int from accounts where rate_limit_policy_id = $1 and deleted_at is null) as accounts,
              (select count(*)::int from api_keys k where k.rate_limit_policy_id = $1 and ${API_KEY_IN_USE_SQL}) as keys`,
      [policy.id],
    );
    const { accounts = 0, keys = 0 } = usage[0] ?? {};
    if (accounts > 0 || keys > 0) {
      throw zenovaError('ZN_ERR_CP_POLICY_IN_USE',
        `Rate-limit policy '${name}' is used by ${accounts} account(s) and ${keys} active API key(s); detach it from the accounts (PATCH) and revoke the keys first.`);
    }
    await client.query('update rate_limit_policies set deleted_at = now() where id = $1', [policy.id]);
    return { value: policy, change: { entity: 'rate-limit-policy', entityId: policy.id, action: 'delete' } };
  });
}
