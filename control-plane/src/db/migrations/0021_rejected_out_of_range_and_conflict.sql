-- Two more reasons a record is set aside (docs/spool.md, "Ingestion"):
-- 'received_at_out_of_range': its receivedAt is more than a day ahead of the control plane's clock
-- or more than 400 days behind it. Every distinct month of a batch got its own partition, never
-- dropped: one enrolled node (a hostile one, or a clock far off) made 1,084 with one batch of
-- 1,000 records, under the lock every replica's ingestion waits on, and slowed every query on
-- request_records. Kept here instead, it gets no partition.
-- 'request_id_conflict': the node sent a record again under a request id its earlier record holds,
-- with other content. The first copy stays ingested and charged; the other is kept here for the
-- operator rather than acked as a duplicate and forgotten.
alter table rejected_request_records drop constraint rejected_request_records_reason_check;
alter table rejected_request_records add constraint rejected_request_records_reason_check
  check (reason in ('not_utf8', 'not_json', 'invalid_record', 'request_id_mismatch', 'foreign_node', 'too_large', 'invalid_request_id',
                    'request_id_taken', 'received_at_out_of_range', 'request_id_conflict'));
