/**
 * How config admin operations write: the change and its config version in one transaction, the
 * version recorded last (see config-changes.ts), so a change that fails bumps nothing.
 */
import type pg from 'pg';
import { latestConfigVersion, recordConfigChange } from './config-changes.js';
import type { ConfigChange } from './config-changes.js';
import { withTransaction } from '../nodes/with-transaction.js';

export interface ConfigMutation<T> {
  value: T;
  /** Null: nothing changed (an idempotent repeat); no new version is recorded. */
  change: ConfigChange | null;
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
    const { value, change } = await fn(client);
    if (change) return { value, configVersion: await recordConfigChange(client, change) };
    return { value, configVersion: await latestConfigVersion(client) };
  });
}

const UNIQUE_VIOLATION = '23505';

export function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === UNIQUE_VIOLATION;
}
