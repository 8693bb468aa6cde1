/**
 * Config versions. Every admin change to what nodes serve records one row in `config_changes`
 * inside its own transaction; the row's version is the new config version, and a
 * `NOTIFY zenova_config_changed, '<version>'` goes out when (and only if) the transaction commits.
 *
 * Versions commit in order: the writer holds a transaction-level advisory lock from the insert to
 * its commit, so no change can take version N+1 while version N is uncommitted. A reader that
 * takes the latest version and the config tables in ONE snapshot (one REPEATABLE READ transaction)
 * therefore sees exactly the changes up to that version.
 */
import type pg from 'pg';
import type { Queryable } from '../nodes/with-transaction.js';

export const CONFIG_CHANGED_CHANNEL = 'zenova_config_changed';

/** Serialises config changes across replicas ("zenova" + 0005; 0001..0004 are taken). */
export const CONFIG_CHANGE_LOCK_KEY = BigInt('0x7a656e6f76610005').toString();

export type ConfigEntity =
  | 'account'
  | 'api-key'
  | 'upstream'
  | 'route'
  | 'rate-limit-policy'
  | 'guardrail-policy'
  | 'price'
  | 'node'
  | 'tool-server';

export type ConfigAction = 'create' | 'update' | 'delete' | 'revoke';

export interface ConfigChange {
  entity: ConfigEntity;
  /** The changed thing's id (or key, e.g. a price's model); null when there is none. */
  entityId: string | null;
  action: ConfigAction;
}

/**
 * Records a change and queues its NOTIFY; returns the new config version. Call it on the client of
 * an open transaction, AFTER the transaction's own writes: the lock it takes is held until commit,
 * and taking it last keeps lock order the same in every writer (no deadlocks).
 */
export async function recordConfigChange(client: pg.ClientBase, change: ConfigChange): Promise<number> {
  await lockConfigChanges(client);
  const { rows } = await client.query<{ version: string }>(
    'insert into config_changes (entity, entity_id, action) values ($1, $2, $3) returning version',
    [change.entity, change.entityId, change.action],
  );
  const version = rows[0]!.version;
  await client.query('select pg_notify($1, $2)', [CONFIG_CHANGED_CHANNEL, version]);
  return Number(version);
}

/**
 * Takes the config-change lock until the transaction ends (taking it again is a no-op): no other
 * change can commit meanwhile, and every change committed before is visible to the next statement.
 */
export async function lockConfigChanges(client: pg.ClientBase): Promise<void> {
  await client.query('select pg_advisory_xact_lock($1::bigint)', [CONFIG_CHANGE_LOCK_KEY]);
}

/** The newest committed config version (1 on a fresh installation). */
export async function latestConfigVersion(db: Queryable | pg.ClientBase): Promise<number> {
  const { rows } = await db.query<{ version: string | null }>('select max(version)::text as version from config_changes');
  return Number(rows[0]?.version ?? 0);
}

/** The version in a zenova_config_changed payload, or undefined when it is not one. */
export function parseConfigChangedPayload(payload: string | undefined): number | undefined {
  if (payload === undefined || !/^[1-9][0-9]{0,15}$/.test(payload)) return undefined;
  const version = Number(payload);
  return Number.isSafeInteger(version) ? version : undefined;
}
