-- Closed credit leases keep the reservations their node still held outstanding until those
-- requests' records settle (docs/billing.md, "Closed leases").

-- LeaseReport.reported_at: the node's clock when the reported figures were taken (unix ms).
alter table credit_leases add column reported_node_ms bigint;
-- Reservations the node still held when the lease closed and that no record has released yet.
-- Each late record received at or before held_cutoff_ms and finished after it releases
-- reserved − cost (a lease_return keyed by its request id) and takes its reservation off.
alter table credit_leases add column held_micros bigint not null default 0 check (held_micros >= 0);
-- Node clock (unix ms) of the figures the close used (the LeaseReturn or the last LeaseReport).
alter table credit_leases add column held_cutoff_ms bigint;
