-- Retryable enrollment (docs/api.md, "Retrying a lost answer"): a node sends a random redemption
-- key with its redemption; only its SHA-256 is kept with the token, beside the credential the
-- redemption issued. The same token with the same key, within the retry window and before the node
-- connected with that credential, is answered again with a newly issued credential that replaces it.
-- Both columns stay null for redemptions without a key (older nodes): nothing changes for them.
alter table install_tokens add column redemption_key_hash bytea
  check (redemption_key_hash is null or octet_length(redemption_key_hash) = 32);
alter table install_tokens add column redemption_credential_id uuid references node_credentials (id);
