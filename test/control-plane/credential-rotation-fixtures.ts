// What the credential rotation tests share: waiting until the control plane has recorded a node's
// acknowledgement of a credential (its acknowledged_at set).
import type pg from 'pg';
import { waitForRow } from './gateway-harness.js';

/** Resolves once credential `credentialId` is stored as acknowledged. */
export async function credentialAcknowledged(pool: pg.Pool, credentialId: string): Promise<void> {
  await waitForRow(pool, `credential ${credentialId} to be acknowledged`, 'select acknowledged_at from node_credentials where id = $1', [credentialId],
    (r: { acknowledged_at: Date | null }) => r.acknowledged_at !== null);
}
