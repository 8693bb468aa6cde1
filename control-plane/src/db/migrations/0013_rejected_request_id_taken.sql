-- A record whose request id another node's record already holds (docs/spool.md, "Ingestion").
-- request_record_ids is keyed by request id alone, so such a record used to be counted as a
-- duplicate and acknowledged: its node deleted it and it was lost with its charge. Another
-- enrolled node sending a record with this node's request id (the x-request-id its callers see)
-- was enough. It is now kept aside here as 'request_id_taken', naming the node holding the id.
alter table rejected_request_records drop constraint rejected_request_records_reason_check;
alter table rejected_request_records add constraint rejected_request_records_reason_check
  check (reason in ('not_utf8', 'not_json', 'invalid_record', 'request_id_mismatch', 'foreign_node', 'too_large', 'invalid_request_id', 'request_id_taken'));
