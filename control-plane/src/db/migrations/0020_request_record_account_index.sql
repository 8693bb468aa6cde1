-- The list API filters by account (GET /api/v1/requests?account=, reconciling an account's spend
-- with its records), newest first in keyset pages on (received_at, request_id): without an index
-- on account_id, a page read the window's records of every account to find one account's. As the
-- other filters' indexes (0006, 0008), rows of one received_at are ordered by an incremental sort.
-- Partial: a record without an account (a refusal without a valid key) is never listed by one, so
-- ingesting it costs this index nothing (docs/performance.md, bench:ingest). The build holds off
-- ingestion (not reads) while it runs.
create index request_records_account_idx on request_records (account_id, received_at desc)
  where account_id is not null;
