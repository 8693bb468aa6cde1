/**
 * Topping up an account (docs/billing.md): one `credit` ledger row and the stored balance, in one
 * transaction under the account's balance lock. A balance stays at most 2^53 − 1 micro-units (a
 * top-up past it is refused, docs/api.md); sums over time (spend, a lease's cumulative grant) are
 * not bounded, so the API writes every amount as an exact integer (billing-views.ts). Every
 * replica hears of the top-up (credit-changes.ts) and re-leases at once. A top-up's `reference` is
 * its idempotency key within the account: a retry of it (a timed-out call sent again) credits
 * nothing more.
 */
import type pg from 'pg';
import { zenovaError } from '../errors.js';
import { withTransaction } from '../nodes/with-transaction.js';
import { notifyCreditChanged } from './credit-changes.js';
import { adjustBalance, appendLedger, lockAccountBalance } from './ledger.js';

export interface CreditResult {
  /** true: an earlier top-up with this reference and amount was found, and nothing was credited. */
  replayed: boolean;
}

/** Whether a top-up of the account carries exactly this reference (a retry, not a new key). */
export async function creditReferenceUsed(pool: pg.Pool, accountId: string, reference: string): Promise<boolean> {
  const { rowCount } = await pool.query(
    `select 1 from billing_ledger where account_id = $1 and kind = 'credit' and reference = $2 limit 1`,
    [accountId, reference],
  );
  return (rowCount ?? 0) > 0;
}

/**
 * `reference` is stored as given (the API gives its NFC form); `alsoAsSent`, the form the client
 * sent when it differs, is matched too: a top-up stored before references were normalised (or by a
 * replica of an older release during a rolling upgrade) holds it as its client sent it, and the
 * client's retry must replay it, not credit again.
 */
export async function creditAccount(pool: pg.Pool, accountId: string, amountMicros: bigint, reference: string | null, alsoAsSent?: string): Promise<CreditResult> {
  return withTransaction(pool, async (client) => {
    const balance = await lockAccountBalance(client, accountId);
    if (balance === undefined) throw zenovaError('ZN_ERR_CP_ACCOUNT_NOT_FOUND');
    // Looked up under the balance lock, so two concurrent retries cannot both credit. Not a unique
    // index: ledgers from before this rule may hold a reference twice, and a retry of either amount
    // is still a retry.
    if (reference !== null) {
      const { rows } = await client.query<{ sameAmount: boolean; amount: string }>(
        `select bool_or(amount_micros = $3) as "sameAmount", min(amount_micros)::text as amount
           from billing_ledger where account_id = $1 and kind = 'credit' and reference = any($2::text[])
         having count(*) > 0`,
        [accountId, alsoAsSent !== undefined && alsoAsSent !== reference ? [reference, alsoAsSent] : [reference], amountMicros.toString()],
      );
      const earlier = rows[0];
      if (earlier?.sameAmount === true) return { replayed: true };
      if (earlier !== undefined) {
        throw zenovaError('ZN_ERR_CP_CREDIT_REFERENCE_USED',
          `reference: already used by a top-up of ${earlier.amount} micro-units of this account; a retry must send the same amount, a new top-up a new reference.`);
      }
    }
    if (balance.balanceMicros + amountMicros > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', `amountMicros: would take the balance beyond ${Number.MAX_SAFE_INTEGER} micro-units`);
    }
    await appendLedger(client, { accountId, kind: 'credit', amountMicros, reference });
    await adjustBalance(client, accountId, { balance: amountMicros });
    await notifyCreditChanged(client, accountId);
    return { replayed: false };
  });
}
