-- Every live node's lease refresh asks, per account without free credit, whether the account has a
-- lease to reclaim (credit-leases.ts, accountsToLeaseQuery). Returned leases pile up (one per close
-- or restart), so that question reads only the leases that can answer it: open ones, and closed
-- ones still holding credit.
create index credit_leases_reclaimable_idx on credit_leases (account_id)
  where state = 'open' or granted_micros - spent_micros - returned_micros > 0;
