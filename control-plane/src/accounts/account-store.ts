/**
 * Accounts in PostgreSQL: create, list, find, patch status / rate-limit policy. An account is found
 * by name or id, a name first, as the billing routes find it (billing-views.ts findAccount). A policy is named
 * in the body and attached under a share lock (see policies/rate-limit-policy-store.ts); an
 * unknown one is a 400 naming the field. Every write that changes something records a config
 * version in its transaction; a patch that leaves the account as it is records none.
 */
import type pg from 'pg';
import { invalidField } from '../config/config-fields.js';
import { findAccount } from '../billing/billing-views.js';
import { withConfigChange, isUniqueViolation } from '../config/config-store.js';
import type { ConfigMutationResult } from '../config/config-store.js';
import { zenovaError } from '../errors.js';
import { checkIfMatch } from '../http/if-match.js';
import type { IfMatch } from '../http/if-match.js';
import type { Queryable } from '../nodes/with-transaction.js';
import { lockRateLimitPolicyByName } from '../policies/rate-limit-policy-store.js';
import type { AccountCreateInput, AccountPatch } from './account-validation.js';
import { accountEtag } from './account-view.js';
import type { AccountRow } from './account-view.js';

const SELECT = `select a.id, a.name, a.status, p.name as "rateLimitPolicy", a.created_at as "createdAt"
  from accounts a left join rate_limit_policies p on p.id = a.rate_limit_policy_id`;

function notFound(nameOrId: string): Error {
  return zenovaError('ZN_ERR_CP_ACCOUNT_NOT_FOUND', `No account named or with id '${nameOrId}'.`);
}

/** The policy id for `rateLimitPolicy` (undefined = keep, null = none), or a 400 naming the field. */
async function policyId(client: pg.PoolClient, name: string | null): Promise<string | null> {
  if (name === null) return null;
  const policy = await lockRateLimitPolicyByName(client, name);
  if (!policy) throw invalidField('rateLimitPolicy', `no rate-limit policy named '${name}'`);
  return policy.id;
}

async function selectById(db: Queryable, id: string): Promise<AccountRow> {
  const { rows } = await db.query<AccountRow>(`${SELECT} where a.id = $1`, [id]);
  return rows[0]!;
}

export async function createAccount(pool: pg.Pool, input: AccountCreateInput): Promise<ConfigMutationResult<AccountRow>> {
  try {
    return await withConfigChange(pool, async (client) => {
      const rateLimitPolicyId = await policyId(client, input.rateLimitPolicy ?? null);
      const { rows } = await client.query<{ id: string }>(
        'insert into accounts (name, status, rate_limit_policy_id) values ($1, $2, $3) returning id',
        [input.name, input.status, rateLimitPolicyId],
      );
      const account = await selectById(client, rows[0]!.id);
      return { value: account, change: { entity: 'account', entityId: account.id, action: 'create' } };
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw zenovaError('ZN_ERR_CP_NAME_TAKEN', `name: an account named '${input.name}' already exists`);
    throw err;
  }
}

/** One page of live accounts by name (on accounts_live_name_key), after the name `after`; `next` is the last name when more follow. */
export async function listAccounts(db: Queryable, page: { limit: number; after?: string | undefined }): Promise<{ accounts: AccountRow[]; next: string | undefined }> {
  const values: unknown[] = [];
  const after = page.after === undefined ? '' : ` and a.name > $${values.push(page.after)}`;
  const { rows } = await db.query<AccountRow>(`${SELECT} where a.deleted_at is null${after} order by a.name limit $${values.push(page.limit + 1)}`, values);
  const accounts = rows.slice(0, page.limit);
  return { accounts, next: rows.length > page.limit ? accounts.at(-1)?.name : undefined };
}

/** The live account named `nameOrId`, else the one with that id (a name first, as findAccount). */
export async function getAccount(db: Queryable, nameOrId: string): Promise<AccountRow> {
  const found = await findAccount(db, nameOrId);
  const { rows } = found === undefined ? { rows: [] } : await db.query<AccountRow>(`${SELECT} where a.id = $1 and a.deleted_at is null`, [found.id]);
  if (!rows[0]) throw notFound(nameOrId);
  return rows[0];
}

/** The live account's id, share-locked until the caller's transaction ends; undefined when none. */
export async function lockAccountByName(client: pg.PoolClient, name: string): Promise<{ id: string } | undefined> {
  const { rows } = await client.query<{ id: string }>('select id from accounts where name = $1 and deleted_at is null for share', [name]);
  return rows[0];
}

/** Patches the live account named `nameOrId`, else the one with that id (a name first, as findAccount). */
export async function patchAccount(pool: pg.Pool, nameOrId: string, patch: AccountPatch, ifMatch?: IfMatch): Promise<ConfigMutationResult<AccountRow>> {
  return withConfigChange(pool, async (client) => {
    const found = await findAccount(client, nameOrId);
    // Locked by id, still live: an account is never renamed, but it may have been deleted since.
    const { rows } = found === undefined ? { rows: [] } : await client.query<{ id: string; status: string; rateLimitPolicyId: string | null }>(
      'select id, status, rate_limit_policy_id as "rateLimitPolicyId" from accounts where id = $1 and deleted_at is null for update',
      [found.id],
    );
    const current = rows[0];
    if (current === undefined) throw notFound(nameOrId);
    const id = current.id;
    // Under the row lock until commit: a writer holding the same ETag waits here and is refused.
    if (ifMatch !== undefined) checkIfMatch(ifMatch, accountEtag(await selectById(client, id)));
    // Resolved before the comparison, so an unknown policy is a 400 whatever else the patch says.
    const rateLimitPolicyId = patch.rateLimitPolicy === undefined ? undefined : await policyId(client, patch.rateLimitPolicy);
    const unchanged = (patch.status === undefined || patch.status === current.status)
      && (rateLimitPolicyId === undefined || rateLimitPolicyId === current.rateLimitPolicyId);
    if (unchanged) return { value: await selectById(client, id), change: null };
    await client.query(
      `update accounts set status = coalesce($2, status),
                           rate_limit_policy_id = case when $3::boolean then $4::uuid else rate_limit_policy_id end
        where id = $1`,
      [id, patch.status ?? null, rateLimitPolicyId !== undefined, rateLimitPolicyId ?? null],
    );
    const account = await selectById(client, id);
    // A status change never grows a bundle (limits count every account as suspended), so a
    // suspension goes through even when the config is at its limits; attaching a policy may.
    return { value: account, change: { entity: 'account', entityId: id, action: 'update' }, grows: rateLimitPolicyId != null };
  });
}
