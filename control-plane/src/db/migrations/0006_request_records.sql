-- Request records backfilled from nodes (issue 6; docs/spool.md). One row per request, ingested
-- idempotently by request id into monthly range partitions on received_at.
--
-- Idempotency: a unique key on a partitioned table must include the partition key, and the same
-- request id resent later must never land twice even if its received_at were different. So ids
-- live in a small non-partitioned table, request_record_ids, whose primary key is the request id:
-- ingestion inserts the batch's ids there with ON CONFLICT DO NOTHING and writes to request_records
-- only the ids that insert returned, in the same transaction. It also maps an id to its
-- received_at, so a lookup by id reads one partition.

create table request_record_ids (
  request_id  text primary key check (length(request_id) between 1 and 128),
  received_at timestamptz not null,
  node_id     text not null
);

create table request_records (
  request_id    text not null,
  received_at   timestamptz not null,
  finished_at   timestamptz not null,
  node_id       text not null,
  -- The node's name when the record was ingested (a deleted node's records keep it).
  node_name     text,
  key_id        text,
  account_id    text,
  model         text,
  api           text not null,
  status        text not null check (status in ('ok', 'rejected', 'failed', 'aborted', 'interrupted')),
  http_status   integer not null,
  error_code    text,
  input_tokens  bigint not null,
  output_tokens bigint not null,
  cost_micros   bigint not null,
  -- The whole record as the node sent it (proto/src/request-record.ts), validated on ingestion.
  record        jsonb not null,
  ingested_at   timestamptz not null default now(),
  primary key (received_at, request_id)
) partition by range (received_at);

-- Partitions (request_records_pYYYYMM) are created on demand by the ingestion, under an advisory
-- lock, before the first record of their month is inserted (control-plane/src/records/).

-- The list API: newest first with keyset pagination, optionally narrowed by node, key, model, status.
create index request_records_recent_idx on request_records (received_at desc, request_id desc);
create index request_records_node_idx on request_records (node_id, received_at desc);
create index request_records_key_idx on request_records (key_id, received_at desc);
create index request_records_model_idx on request_records (model, received_at desc);
create index request_records_status_idx on request_records (status, received_at desc);
