/**
 * Topping up an account (docs/billing.md): one `credit` ledger row and the stored balance, in one
 * transaction under the account's balance lock. Balances stay below 2^53 micro-units so the API can
 * show them as exact JSON numbers. Every replica hears of the top-up (credit-changes.ts) and
 * re-leases at once.
 */
import type pg from 'pg';
import { zenovaError } from '../errors.js';
import { withTransaction } from '../nodes/with-transaction.js';
import { notifyCreditChanged } from './credit-changes.js';
import { adjustBalance, appendLedger, lockAccountBalance } from './ledger.js';

export async function creditAccount(pool: pg.Pool, accountId: string, amountMicros: bigint, reference: string | null): Promise<void> {
  await withTransaction(pool, async (client) => {
    const balance = await lockAccountBalance(client, accountId);
    if (balance === undefined) throw zenovaError('ZN_ERR_CP_ACCOUNT_NOT_FOUND');
    if (balance.balanceMicros + amountMicros > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', `amountMicros: would take the balance beyond ${Number.MAX_SAFE_INTEGER} micro-units`);
    }
    await appendLedger(client, { accountId, kind: 'credit', amountMicros, reference });
    await adjustBalance(client, accountId, { balance: amountMicros });
    await notifyCreditChanged(client, accountId);
  });
}
