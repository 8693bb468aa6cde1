-- A top-up's reference is its idempotency key within the account (billing/account-credits.ts looks
-- it up under the account's balance lock). Not unique: ledgers written before this rule may hold a
-- reference twice, and the ledger is append-only, so a unique index could not be built on them.
create index billing_ledger_credit_reference_idx on billing_ledger (account_id, reference)
  where kind = 'credit' and reference is not null;
