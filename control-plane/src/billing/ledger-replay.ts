/**
 * Recomputes every account's stored figures and every lease's amounts from the ledger alone
 * (docs/billing.md, "Ledger"): the audit that the stored balances are what the money movements
 * say. Returns the differences; none means the books agree.
 */
import type { Queryable } from '../nodes/with-transaction.js';

export interface ReplayDifference {
  what: 'account' | 'lease';
  id: string;
  field: string;
  stored: string;
  replayed: string;
}

export async function replayLedger(db: Queryable): Promise<ReplayDifference[]> {
  const diffs: ReplayDifference[] = [];
  const accounts = await db.query<{ id: string; balance: string; outstanding: string; spent: string; r_balance: string; r_outstanding: string; r_spent: string }>(
    `with l as (
       select account_id,
              coalesce(sum(amount_micros) filter (where kind in ('credit', 'adjustment')), 0)
                - coalesce(sum(amount_micros) filter (where kind = 'debit'), 0) as balance,
              coalesce(sum(amount_micros) filter (where kind = 'lease_grant'), 0)
                - coalesce(sum(amount_micros) filter (where kind = 'lease_return'), 0)
                - coalesce(sum(amount_micros) filter (where kind = 'debit' and lease_id is not null), 0) as outstanding,
              coalesce(sum(amount_micros) filter (where kind = 'debit'), 0) as spent
         from billing_ledger group by account_id)
     select coalesce(b.account_id, l.account_id) as id,
            coalesce(b.balance_micros, 0)::text as balance, coalesce(b.outstanding_micros, 0)::text as outstanding,
            coalesce(b.spent_micros, 0)::text as spent,
            coalesce(l.balance, 0)::text as r_balance, coalesce(l.outstanding, 0)::text as r_outstanding, coalesce(l.spent, 0)::text as r_spent
       from account_balances b full join l on l.account_id = b.account_id`,
  );
  for (const r of accounts.rows) {
    for (const [field, stored, replayed] of [
      ['balance', r.balance, r.r_balance],
      ['outstanding', r.outstanding, r.r_outstanding],
      ['spent', r.spent, r.r_spent],
    ] as const) {
      if (stored !== replayed) diffs.push({ what: 'account', id: r.id, field, stored, replayed });
    }
  }
  const leases = await db.query<{ id: string; granted: string; spent: string; returned: string; r_granted: string; r_spent: string; r_returned: string }>(
    `select c.id, c.granted_micros::text as granted, c.spent_micros::text as spent, c.returned_micros::text as returned,
            coalesce(sum(l.amount_micros) filter (where l.kind = 'lease_grant'), 0)::text as r_granted,
            coalesce(sum(l.amount_micros) filter (where l.kind = 'debit'), 0)::text as r_spent,
            coalesce(sum(l.amount_micros) filter (where l.kind = 'lease_return'), 0)::text as r_returned
       from credit_leases c left join billing_ledger l on l.lease_id = c.id
      group by c.id`,
  );
  for (const r of leases.rows) {
    for (const [field, stored, replayed] of [
      ['granted', r.granted, r.r_granted],
      ['spent', r.spent, r.r_spent],
      ['returned', r.returned, r.r_returned],
    ] as const) {
      if (stored !== replayed) diffs.push({ what: 'lease', id: r.id, field, stored, replayed });
    }
  }
  return diffs;
}

export interface OvercommittedAccount {
  accountId: string;
  balanceMicros: bigint;
  /** Σ max(granted − spent − returned, 0) over the account's leases, open and closed. */
  committedMicros: bigint;
}

/**
 * The lease invariant (docs/billing.md, "Leases"): for every account, Σ outstanding of its leases ≤
 * its balance. Returns the accounts that break it, none when it holds. A lease with a negative
 * outstanding (cost settled beyond what it held) does not make up for another one, so each
 * lease counts at least 0 — the same sum a grant uses to decide what is free.
 */
export async function checkLeaseInvariant(db: Queryable): Promise<OvercommittedAccount[]> {
  const { rows } = await db.query<{ id: string; balance: string; committed: string }>(
    `select b.account_id as id, b.balance_micros::text as balance, c.committed::text as committed
       from account_balances b
       join (select account_id, sum(greatest(granted_micros - spent_micros - returned_micros, 0)) as committed
               from credit_leases group by account_id) c on c.account_id = b.account_id
      where c.committed > b.balance_micros
      order by b.account_id`,
  );
  return rows.map((r) => ({ accountId: r.id, balanceMicros: BigInt(r.balance), committedMicros: BigInt(r.committed) }));
}

export interface LeaseReturnedBeyondGrant {
  leaseId: string;
  accountId: string;
  grantedMicros: bigint;
  returnedMicros: bigint;
}

/**
 * Leases that gave back more than they were ever granted (docs/billing.md, "Node figures beyond the
 * grant"): never right, whatever was spent — every return is of credit the lease held. None when the
 * books are sound. (A lease spent past its grant is no such case: late costs, logged at settlement.)
 */
export async function checkLeaseReturns(db: Queryable): Promise<LeaseReturnedBeyondGrant[]> {
  const { rows } = await db.query<{ id: string; account: string; granted: string; returned: string }>(
    `select id, account_id as account, granted_micros::text as granted, returned_micros::text as returned
       from credit_leases where returned_micros > granted_micros order by id`,
  );
  return rows.map((r) => ({ leaseId: r.id, accountId: r.account, grantedMicros: BigInt(r.granted), returnedMicros: BigInt(r.returned) }));
}
