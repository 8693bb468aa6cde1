-- MCP tool servers (issue 5, the tools surface): callers reach each one at /mcp/{name} on a node
-- that serves the `tools` surface. Soft-deleted like the other named config rows, so a name can
-- be used again after a delete.
create table tool_servers (
  id               uuid primary key default gen_random_uuid(),
  -- The bundle's rule (proto/src/config-bundle.ts): it is a path segment on every node.
  name             text not null check (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
  -- The server's MCP endpoint (streamable HTTP), called as is.
  url              text not null check (url ~ '^https?://'),
  -- Sent as "Authorization: Bearer …" by nodes; sealed with ZENOVA_SECRET_ENC_KEY (context
  -- 'tool-server-secret:<id>'); null when the server needs none.
  secret_encrypted bytea,
  timeout_ms       integer not null default 60000 check (timeout_ms between 100 and 600000),
  -- Integer micro-units charged per call (0 = free); never floats.
  call_micros      bigint not null default 0 check (call_micros >= 0),
  created_at       timestamptz not null default now(),
  updated_at       timestamptz not null default now(),
  deleted_at       timestamptz
);
create unique index tool_servers_live_name_key on tool_servers (name) where deleted_at is null;
