-- Records a node sent that the control plane could not ingest (docs/spool.md, "Ingestion"): not
-- UTF-8 or not JSON, not a valid request record (a damaged spool row, or a record a newer node
-- wrote that this control plane cannot parse), another request id than its batch entry, another
-- node's. Each is kept here as it was sent, in the same transaction as the good records of its
-- batch, and the batch is acknowledged: one bad record no longer ends every control session and
-- holds up the backlog behind it. Nothing here is charged or shown in the requests API.
--
-- A resend of the same record (a lost ack) is stored once: unique on node, request id as sent
-- and the SHA-256 of the bytes as sent.

create table rejected_request_records (
  id            bigint generated always as identity primary key,
  node_id       text not null,
  node_name     text,
  -- The batch entry's request id as sent, cut to 128 characters (NUL and unpaired surrogates as U+FFFD).
  request_id    text not null,
  -- Why it was rejected: a code, and a short detail (field paths and schema messages, no content).
  reason        text not null check (reason in ('not_utf8', 'not_json', 'invalid_record', 'request_id_mismatch', 'foreign_node', 'too_large', 'invalid_request_id')),
  detail        text not null,
  -- The record as sent, cut to 1 MiB: as text when those bytes are UTF-8 without NUL, else as bytea.
  record_text   text,
  record_bytes  bytea,
  -- Size and SHA-256 of the whole record as sent (before any cut).
  record_size   integer not null,
  record_sha256 bytea not null,
  batch_id      text not null,
  received_at   timestamptz not null default now(),
  check ((record_text is null) <> (record_bytes is null))
);

create unique index rejected_request_records_key on rejected_request_records (node_id, request_id, record_sha256);
create index rejected_request_records_recent_idx on rejected_request_records (received_at desc);
