/**
 * Credit top-ups, heard by every control-plane replica: a credit commits together with a
 * `NOTIFY zenova_credit_changed, '<account id>'`, and each replica's lease handler then reconsiders
 * its live nodes' leases at once (lease-stream-handler.ts `wake`) instead of at its next refresh,
 * so an account that was out of credit is served again within moments of being topped up.
 */
import type pg from 'pg';

export const CREDIT_CHANGED_CHANNEL = 'zenova_credit_changed';

/** Queues the NOTIFY on the client of an open transaction; it goes out only if that commits. */
export async function notifyCreditChanged(client: pg.ClientBase, accountId: string): Promise<void> {
  await client.query('select pg_notify($1, $2)', [CREDIT_CHANGED_CHANNEL, accountId]);
}
