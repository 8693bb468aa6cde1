-- Billing (issue 7, docs/billing.md): an append-only ledger of every money movement, each
-- account's stored balance (recomputable from the ledger), and the credit leases granted to nodes.
-- Money is bigint micro-units; never floats.

-- One row per (account, node) lease. Outstanding = granted − spent − returned: credit the node may
-- still spend (or has spent and not yet reported through records).
create table credit_leases (
  id                       uuid primary key default gen_random_uuid(),
  node_id                  uuid not null references nodes (id),
  account_id               uuid not null references accounts (id),
  state                    text not null default 'open' check (state in ('open', 'returned')),
  -- Cumulative granted total (LeaseGrant.amount_micros carries exactly this).
  granted_micros           bigint not null default 0 check (granted_micros >= 0),
  -- Settled spend: the sum of the debits of ingested records charged to this lease.
  spent_micros             bigint not null default 0 check (spent_micros >= 0),
  -- Credit handed back to the account (LeaseReturn, node deletion).
  returned_micros          bigint not null default 0 check (returned_micros >= 0),
  expires_at               timestamptz not null,
  -- The node's last LeaseReport (its own view, ahead of ingestion).
  reported_spent_micros    bigint,
  reported_reserved_micros bigint,
  reported_remaining_micros bigint,
  reported_at              timestamptz,
  created_at               timestamptz not null default now(),
  updated_at               timestamptz not null default now(),
  closed_at                timestamptz,
  check ((state = 'returned') = (closed_at is not null))
);
-- At most one open lease per node and account: grants top it up instead of adding another.
create unique index credit_leases_one_open on credit_leases (node_id, account_id) where state = 'open';
create index credit_leases_account_idx on credit_leases (account_id);

-- The stored figures of each account; every column is recomputable from billing_ledger
-- (control-plane/src/billing/ledger-replay.ts). The row is also the lock every money writer of the
-- account takes first (SELECT … FOR UPDATE), so grants cannot overshoot the balance.
create table account_balances (
  account_id         uuid primary key references accounts (id),
  -- credits + adjustments − debits.
  balance_micros     bigint not null default 0,
  -- Σ outstanding of the account's leases (granted − spent − returned).
  outstanding_micros bigint not null default 0,
  -- Σ debits (settled request costs).
  spent_micros       bigint not null default 0 check (spent_micros >= 0),
  updated_at         timestamptz not null default now()
);

-- Append-only: rows are never updated or deleted.
create table billing_ledger (
  id           bigserial primary key,
  account_id   uuid not null references accounts (id),
  kind         text not null check (kind in ('credit', 'adjustment', 'debit', 'lease_grant', 'lease_return')),
  -- Positive, except adjustments which may correct either way.
  amount_micros bigint not null check (kind = 'adjustment' or amount_micros > 0),
  lease_id     uuid references credit_leases (id),
  node_id      uuid references nodes (id),
  -- Debits: the request charged, its key and model alias. Also set on the lease_return of an
  -- interrupted request's reservation (the node wrote it off as spent; nothing was charged).
  request_id   text,
  key_id       text,
  model        text,
  -- Credits/adjustments: the operator's reference (invoice, payment id).
  reference    text check (reference is null or length(reference) <= 256),
  -- When the money moved (debits: when the request finished on the node).
  occurred_at  timestamptz not null default now(),
  created_at   timestamptz not null default now(),
  check (kind <> 'debit' or request_id is not null),
  check (request_id is null or kind in ('debit', 'lease_return')),
  check (kind not in ('lease_grant', 'lease_return') or lease_id is not null)
);
-- Exactly once: one debit per request id, whatever retries or replays deliver.
create unique index billing_ledger_one_debit_per_request on billing_ledger (request_id) where kind = 'debit';
create unique index billing_ledger_one_write_off_per_request on billing_ledger (request_id) where kind = 'lease_return' and request_id is not null;
create index billing_ledger_account_idx on billing_ledger (account_id, id);
create index billing_ledger_debits_time_idx on billing_ledger (occurred_at) where kind = 'debit';

create or replace function billing_ledger_append_only() returns trigger language plpgsql as $$
begin
  raise exception 'billing_ledger is append-only';
end $$;
create trigger billing_ledger_no_update before update or delete on billing_ledger
  for each row execute function billing_ledger_append_only();
