-- Console sessions (docs/console.md): the browser holds a random 32-byte session id in an HttpOnly
-- cookie; only its SHA-256 is kept here, so a read of this table (a backup, a replica) cannot be
-- replayed as a login. A session ends at expires_at (12 h after login) or when it logs out (the row
-- is deleted); expired rows are swept at each login. token_tag (an HMAC keyed with the admin token)
-- names the admin token the session was opened with: after a restart with another token, the old
-- token's sessions are refused.
create table console_sessions (
  id_hash    bytea primary key check (octet_length(id_hash) = 32),
  token_tag  bytea not null check (octet_length(token_tag) = 32),
  created_at timestamptz not null default now(),
  expires_at timestamptz not null
);

create index console_sessions_expires_at_idx on console_sessions (expires_at);
