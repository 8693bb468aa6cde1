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

/**
 * How far one node's report may move the versions on: further than any real gap between a backup
 * and the last version a node applied, and small enough that a node reporting nonsense cannot run
 * the versions out.
 */
export const MAX_VERSION_CATCH_UP = 1_000_000;

/**
 * A node applied `applied`, past the newest version here: the database was restored from a backup
 * taken before that version (versions count again from the backup's). Nodes refuse versions older
 * than one they applied, so without this they would keep the config they had — changes the restore
 * undid included — and take none made after it until the versions pass theirs. Records a change
 * that moves the versions past `applied` (the config itself is unchanged) and notifies every
 * session, so every node is pushed the current config. `sameVersionDiffers`: the node holds the
 * newest version here but another config under that number (the restore's versions have caught up
 * with the node's), so the versions move on even when `applied` is the newest. Returns the new
 * version; 'already' when the versions are past `applied` by now (another replica or session moved
 * them, or a change was made), 'too-far' when `applied` is more than MAX_VERSION_CATCH_UP past
 * them (nothing is changed).
 */
export async function continueVersionsPast(
  pool: pg.Pool,
  applied: number,
  opts: { sameVersionDiffers?: boolean } = {},
): Promise<number | 'already' | 'too-far'> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    await lockConfigChanges(client);
    const latest = await latestConfigVersion(client);
    const passed = opts.sameVersionDiffers === true ? applied < latest : applied <= latest;
    if (passed || applied - latest > MAX_VERSION_CATCH_UP) {
      await client.query('rollback');
      return passed ? 'already' : 'too-far';
    }
    if (applied > latest) await client.query("select setval(pg_get_serial_sequence('config_changes', 'version'), $1::bigint)", [applied]);
    const { rows } = await client.query<{ version: string }>(
      "insert into config_changes (entity, entity_id, action) values ('installation', null, 'versions-continued') returning version",
    );
    const version = rows[0]!.version;
    await client.query('select pg_notify($1, $2)', [CONFIG_CHANGED_CHANNEL, version]);
    await client.query('commit');
    return Number(version);
  } catch (err) {
    await client.query('rollback').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/** The version in a zenova_config_changed payload, or undefined when it is not one. */
export function parseConfigChangedPayload(payload: string | undefined): number | undefined {
  if (payload === undefined || !/^[1-9][0-9]{0,15}$/.test(payload)) return undefined;
  const version = Number(payload);
  return Number.isSafeInteger(version) ? version : undefined;
}
