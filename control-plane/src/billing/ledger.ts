/**
 * The billing ledger and stored balances (migration 0007): every money movement is one
 * append-only ledger row written in the same transaction as the stored figures it changes, after
 * the account's balance row is locked (lockAccountBalance). Amounts are bigint micro-units.
 */
import type pg from 'pg';

export type LedgerKind = 'credit' | 'adjustment' | 'debit' | 'lease_grant' | 'lease_return';

export interface LedgerEntry {
  accountId: string;
  kind: LedgerKind;
  amountMicros: bigint;
  leaseId?: string | null;
  nodeId?: string | null;
  requestId?: string | null;
  keyId?: string | null;
  model?: string | null;
  reference?: string | null;
  /** Unix ms; default now. */
  occurredAt?: number | null;
}

export interface AccountBalance {
  accountId: string;
  balanceMicros: bigint;
  outstandingMicros: bigint;
  spentMicros: bigint;
}

export const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Locks the account's balance row (creating it at zero) until the transaction ends. Every writer
 * of an account's money takes this lock first, so grants, returns and debits of one account are
 * serialised and the lease invariant holds. undefined when the account does not exist.
 */
export async function lockAccountBalance(client: pg.PoolClient, accountId: string): Promise<AccountBalance | undefined> {
  if (!UUID_PATTERN.test(accountId)) return undefined;
  await client.query(
    `insert into account_balances (account_id) select id from accounts where id = $1 on conflict (account_id) do nothing`,
    [accountId],
  );
  const { rows } = await client.query<{ balance: string; outstanding: string; spent: string }>(
    `select balance_micros::text as balance, outstanding_micros::text as outstanding, spent_micros::text as spent
       from account_balances where account_id = $1 for update`,
    [accountId],
  );
  const row = rows[0];
  if (!row) return undefined;
  return { accountId, balanceMicros: BigInt(row.balance), outstandingMicros: BigInt(row.outstanding), spentMicros: BigInt(row.spent) };
}

/** Appends one ledger row; for a request already charged (or written off), returns false and writes nothing. */
export async function appendLedger(client: pg.PoolClient, e: LedgerEntry): Promise<boolean> {
  const { rowCount } = await client.query(
    `insert into billing_ledger (account_id, kind, amount_micros, lease_id, node_id, request_id, key_id, model, reference, occurred_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, coalesce(to_timestamp($10::bigint / 1000.0), now()))
     on conflict do nothing`,
    [
      e.accountId, e.kind, e.amountMicros.toString(), e.leaseId ?? null, e.nodeId ?? null, e.requestId ?? null,
      e.keyId ?? null, e.model ?? null, e.reference ?? null, e.occurredAt ?? null,
    ],
  );
  return rowCount === 1;
}

/** Adds deltas to the stored figures (the caller holds the lock and wrote the matching ledger rows). */
export async function adjustBalance(
  client: pg.PoolClient,
  accountId: string,
  delta: { balance?: bigint; outstanding?: bigint; spent?: bigint },
): Promise<void> {
  await client.query(
    `update account_balances set balance_micros = balance_micros + $2, outstanding_micros = outstanding_micros + $3,
            spent_micros = spent_micros + $4, updated_at = now()
      where account_id = $1`,
    [accountId, (delta.balance ?? 0n).toString(), (delta.outstanding ?? 0n).toString(), (delta.spent ?? 0n).toString()],
  );
}
