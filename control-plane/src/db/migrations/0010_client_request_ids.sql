-- Records carry the caller's own id (clientRequestId, from x-client-request-id or x-request-id)
-- beside the node-minted request id. The list API filters by it; the index is partial, so records
-- without one (most) cost ingestion nothing here (docs/performance.md, bench:ingest).
create index request_records_client_request_id_idx on request_records ((record ->> 'clientRequestId'), received_at desc)
  where record ? 'clientRequestId';
