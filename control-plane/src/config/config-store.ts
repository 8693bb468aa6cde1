/**
 * How config admin operations write: the change and its config version in one transaction, the
 * version recorded last (see config-changes.ts), so a change that fails bumps nothing.
 */
import type pg from 'pg';
import { latestConfigVersion, lockConfigChanges, recordConfigChange } from './config-changes.js';
import type { ConfigChange } from './config-changes.js';
import { checkBundleLimits, footprintBeforeChange } from './config-limits.js';
import { withTransaction } from '../nodes/with-transaction.js';

export interface ConfigMutation<T> {
  value: T;
  /** Null: nothing changed (an idempotent repeat); no new version is recorded. */
  change: ConfigChange | null;
  /**
   * Whether the change can make nodes' bundles larger, so it is checked against their limits
   * (config-limits.ts) before it is recorded; the check refuses only a change that did. Default: a
   * create or update of what bundles carry.
   */
  grows?: boolean;
}

export interface ConfigMutationResult<T> {
  value: T;
  /** The version the change created, or the latest one when nothing changed. */
  configVersion: number;
}

export async function withConfigChange<T>(
  pool: pg.Pool,
  fn: (client: pg.PoolClient) => Promise<ConfigMutation<T>>,
): Promise<ConfigMutationResult<T>> {
  return withTransaction(pool, async (client) => {
    // Before the writes: a config already past a limit then refuses only a change that makes it worse.
    const before = await footprintBeforeChange(client);
    const { value, change, grows } = await fn(client);
    if (!change) return { value, configVersion: await latestConfigVersion(client) };
    if (grows ?? growsBundles(change)) {
      // Under the lock until commit: what the check counts is what this change commits onto.
      await lockConfigChanges(client);
      await checkBundleLimits(client, before);
    }
    return { value, configVersion: await recordConfigChange(client, change) };
  });
}

/** Revokes and deletes only shrink bundles, and rate-limit policies reach them only once attached. */
function growsBundles(change: ConfigChange): boolean {
  return (change.action === 'create' || change.action === 'update') && change.entity !== 'rate-limit-policy';
}

const UNIQUE_VIOLATION = '23505';

export function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === UNIQUE_VIOLATION;
}
