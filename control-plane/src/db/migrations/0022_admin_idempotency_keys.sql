-- Idempotency keys of admin API creates (docs/api.md, "Retrying a create"): a POST /api/v1/api-keys
-- sent with an `Idempotency-Key` header claims (route, SHA-256 of the key) in the transaction that
-- creates the key, so a retry of a request whose answer was lost (or one sent at the same moment)
-- finds the claim instead of creating a second key: the primary key, not a look-up before the
-- insert, is what makes two requests with one key create one. request_hash is the SHA-256 of the
-- request body's canonical JSON: the same key with another body is refused. resource_id is what
-- the request created (the API key's id); never a secret, which is shown once and not kept. A claim
-- lasts 24 h (expires_at, by the database's clock); an expired one is taken over by the next
-- request with that key, and expired ones are swept after each create that sends a key.
create table admin_idempotency_keys (
  route        text not null,
  key_hash     bytea not null check (octet_length(key_hash) = 32),
  request_hash bytea not null check (octet_length(request_hash) = 32),
  resource_id  uuid,
  created_at   timestamptz not null default now(),
  expires_at   timestamptz not null,
  primary key (route, key_hash)
);

create index admin_idempotency_keys_expires_at_idx on admin_idempotency_keys (expires_at);
