/**
 * Guardrail policies in PostgreSQL: create, list, delete (refused while an active key uses the
 * policy), and the locked look-up keys use to attach one. Every write records a config version in
 * its transaction.
 */
import type pg from 'pg';
import { withConfigChange, isUniqueViolation } from '../config/config-store.js';
import type { ConfigMutationResult } from '../config/config-store.js';
import { zenovaError } from '../errors.js';
import { API_KEY_IN_USE_SQL } from '../keys/api-key-view.js';
import type { Queryable } from '../nodes/with-transaction.js';
import type { GuardrailPolicyInput } from './guardrail-policy-validation.js';
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

export async function deleteGuardrailPolicy(pool: pg.Pool, name: string): Promise<ConfigMutationResult<GuardrailPolicyRow>> {
  return withConfigChange(pool, async (client) => {
    const { rows } = await client.query<GuardrailPolicyRow>(
      `select ${COLUMNS} from guardrail_policies where name = $1 and deleted_at is null for update`,
      [name],
    );
    const policy = rows[0];
    if (!policy) throw zenovaError('ZN_ERR_CP_POLICY_NOT_FOUND', `No guardrail policy named '${name}'.`);
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
