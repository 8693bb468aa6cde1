-- GET /api-keys lists newest first, (created_at, id) descending, in keyset pages, of all keys or one
-- account's (keys/api-key-store.ts, listApiKeys). Without these every page sorted every key: a
-- config may hold up to a million. api_keys_account_idx is kept, as dropping it would lock the
-- table against reads too until the migration commits. GET /accounts pages by name on
-- accounts_live_name_key.
create index api_keys_created_idx on api_keys (created_at desc, id desc);
create index api_keys_account_created_idx on api_keys (account_id, created_at desc, id desc);
