-- The list API filters by node *name* (the name a record was ingested under), so the index on
-- node_id served no query; and request_records_recent_idx repeated the primary key, which a
-- backward index scan already reads newest first. Each secondary index costs every ingested record
-- an index insertion (npm run bench:ingest; docs/performance.md), so only indexes a query uses stay.
drop index request_records_recent_idx;
drop index request_records_node_idx;
create index request_records_node_name_idx on request_records (node_name, received_at desc);
