-- GET /leases lists newest first, (created_at, id) descending, in keyset pages, of all leases, one
-- node's or one account's (billing-views.ts, listLeasesQuery). Without these, every page sorted
-- every lease of the filter: a lease is granted per node and account on each connect, so the
-- table only grows. The builds hold off lease writes (grants, settlement) while they run, about a
-- second per few hundred thousand leases; credit_leases_account_idx is kept, as dropping it would
-- lock the table against reads too until the migration commits.
create index credit_leases_created_idx on credit_leases (created_at desc, id desc);
create index credit_leases_node_created_idx on credit_leases (node_id, created_at desc, id desc);
create index credit_leases_account_created_idx on credit_leases (account_id, created_at desc, id desc);
