/**
 * Guardrail policies in PostgreSQL: create, list, replace (its rules, keeping its id, so the keys
 * that name it keep it), delete (refused while an active key uses the policy), and the locked
 * look-up keys use to attach one. Every write that changes something records a config version in
 * its transaction; a replace that leaves the rules as they are records none.
 */
import type pg from 'pg';
import { withConfigChange, isUniqueViolation } from '../config/config-store.js';
import type { ConfigMutationResult } from '../config/config-store.js';
import { zenovaError } from '../errors.js';
import { checkIfMatch } from '../http/if-match.js';
import type { IfMatch } from '../http/if-match.js';
import { API_KEY_IN_USE_SQL } from '../keys/api-key-view.js';
import type { Queryable } from '../nodes/with-transaction.js';
import type { GuardrailPolicyInput, GuardrailPolicySpec } from './guardrail-policy-validation.js';
import { guardrailPolicyEtag } from './guardrail-policy-view.js';
import type { GuardrailPolicyRow } from './guardrail-policy-view.js';

const COLUMNS = 'id, name, rules, created_at as "createdAt"';

export async function createGuardrailPolicy(pool: pg.Pool, input: GuardrailPolicyInput): Promise<ConfigMutationResult<GuardrailPolicyRow>> {
  try {
    return await withConfigChange(pool, async (client) => {
      const { rows } = await client.query<GuardrailPolicyRow>(
        `insert into guardrail_policies (name, rules) values ($1, $2::jsonb) returning ${COLUMNS}`,
        [input.name, JSON.stringify(input.rules)],
      );
      const policy = rows[0]!;
      return { value: policy, change: { entity: 'guardrail-policy', entityId: policy.id, action: 'create' } };
    });
  } catch (err) {
    if (isUniqueViolation(err)) {
      throw zenovaError('ZN_ERR_CP_NAME_TAKEN', `name: a guardrail policy named '${input.name}' already exists`);
    }
    throw err;
  }
}

export async function listGuardrailPolicies(db: Queryable): Promise<GuardrailPolicyRow[]> {
  const { rows } = await db.query<GuardrailPolicyRow>(`select ${COLUMNS} from guardrail_policies where deleted_at is null order by name`);
  return rows;
}

/** The live policy of that name, share-locked until the caller's transaction ends (see rate-limit-policy-store). */
export async function lockGuardrailPolicyByName(client: pg.PoolClient, name: string): Promise<{ id: string } | undefined> {
  const { rows } = await client.query<{ id: string }>(
    'select id from guardrail_policies where name = $1 and deleted_at is null for share',
    [name],
  );
  return rows[0];
}

function notFound(name: string): Error {
  return zenovaError('ZN_ERR_CP_POLICY_NOT_FOUND', `No guardrail policy named '${name}'.`);
}

/** The live policy of that name. */
export async function getGuardrailPolicy(db: Queryable, name: string): Promise<GuardrailPolicyRow> {
  const { rows } = await db.query<GuardrailPolicyRow>(`select ${COLUMNS} from guardrail_policies where name = $1 and deleted_at is null`, [name]);
  if (!rows[0]) throw notFound(name);
  return rows[0];
}

export async function replaceGuardrailPolicy(
  pool: pg.Pool, name: string, spec: GuardrailPolicySpec, ifMatch?: IfMatch,
): Promise<ConfigMutationResult<GuardrailPolicyRow>> {
  return withConfigChange(pool, async (client) => {
    // Row-locked as a delete locks it: a concurrent replace or delete waits for this commit and
    // then sees what it left (the new rules, or no policy: a 404).
    const { rows: found } = await client.query<GuardrailPolicyRow>(
      `select ${COLUMNS} from guardrail_policies where name = $1 and deleted_at is null for update`,
      [name],
    );
    const current = found[0];
    if (current === undefined) throw notFound(name);
    // Under the row lock until commit: a writer holding the same ETag waits here and is refused.
    checkIfMatch(ifMatch, guardrailPolicyEtag(current));
    // Compared as jsonb (keys in any order, rules and keywords in order: the order nodes get them),
    // so the same rules again change nothing and record no version.
    const { rows } = await client.query<GuardrailPolicyRow & { grew: boolean }>(
      `update guardrail_policies g set rules = $2::jsonb
         from (select octet_length(rules::text) as bytes from guardrail_policies where id = $1) stored
        where g.id = $1 and g.rules is distinct from $2::jsonb
        returning ${COLUMNS}, octet_length(g.rules::text) > stored.bytes as grew`,
      [current.id, JSON.stringify(spec.rules)],
    );
    if (rows[0] === undefined) return { value: current, change: null };
    const { grew, ...replaced } = rows[0];
    return {
      value: replaced,
      change: { entity: 'guardrail-policy', entityId: current.id, action: 'update' },
      // Counted as config-limits.ts counts stored rules: only larger rules can take the bundle
      // past its size, and smaller ones are never refused.
      grows: grew,
    };
  });
}

export async function deleteGuardrailPolicy(pool: pg.Pool, name: string, ifMatch?: IfMatch): Promise<ConfigMutationResult<GuardrailPolicyRow>> {
  return withConfigChange(pool, async (client) => {
    const { rows } = await client.query<GuardrailPolicyRow>(
      `select ${COLUMNS} from guardrail_policies where name = $1 and deleted_at is null for update`,
      [name],
    );
    const policy = rows[0];
    if (!policy) throw notFound(name);
    // Under the row lock until commit: an edit or delete holding the same ETag waits here and is refused.
    checkIfMatch(ifMatch, guardrailPolicyEtag(policy));
    const { rows: usage } = await client.query<{ keys: number }>(
      `select count(*)::int as keys from api_keys k where k.guardrail_policy_id = $1 and ${API_KEY_IN_USE_SQL}`,
      [policy.id],
    );
    const keys = usage[0]?.keys ?? 0;
    if (keys > 0) {
      throw zenovaError('ZN_ERR_CP_POLICY_IN_USE', `Guardrail policy '${name}' is used by ${keys} active API key(s); revoke them first.`);
    }
    await client.query('update guardrail_policies set deleted_at = now() where id = $1', [policy.id]);
    return { value: policy, change: { entity: 'guardrail-policy', entityId: policy.id, action: 'delete' } };
  });
}
