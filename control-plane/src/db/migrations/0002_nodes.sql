-- Nodes, their one-time install tokens and their control-stream credentials (issue 3).
-- Nodes are soft-deleted (deleted_at) so tokens and credentials keep pointing at a row and a redeemed
-- or presented secret of a deleted node can be told apart from an unknown one.

create table nodes (
  id                uuid primary key default gen_random_uuid(),
  name              text not null check (name ~ '^[a-z0-9-]{2,31}$'),
  region            text,
  surfaces          text[] not null
                    check (surfaces <@ array['model', 'tools']::text[] and 'model' = any (surfaces)),
  install_dir       text,
  address           text not null,
  control_plane_url text not null check (control_plane_url like 'https://%'),
  ca_pem            text,
  spool_quota_gb    integer not null default 10 check (spool_quota_gb between 1 and 10000),
  spool_full_policy text not null default 'reject' check (spool_full_policy in ('reject', 'metering-only')),
  replicas          integer not null default 1 check (replicas between 1 and 16),
  created_at        timestamptz not null default now(),
  deleted_at        timestamptz,
  -- Facts reported at enrollment / on the control stream; null until then.
  enrolled_at       timestamptz,
  hostname          text,
  arch              text,
  version           text,
  protocol_version  integer,
  last_heartbeat_at timestamptz,
  onboarding_stage  text check (onboarding_stage in ('registered', 'first-heartbeat', 'config-synced')),
  -- Live figures from the last heartbeat: requests5m, errors5m, spoolBytes, backfillBacklog,
  -- appliedConfigVersion.
  figures           jsonb not null default '{}'::jsonb check (jsonb_typeof(figures) = 'object')
);

-- A name is unique among live nodes only: a deleted node's name may be used again.
create unique index nodes_live_name_key on nodes (name) where deleted_at is null;
create index nodes_live_created_at_idx on nodes (created_at) where deleted_at is null;

create table install_tokens (
  id             uuid primary key default gen_random_uuid(),
  node_id        uuid not null references nodes (id),
  kind           text not null check (kind in ('install', 'reenroll', 'upgrade')),
  -- sha256 of the token text; the text itself is shown once and never stored.
  token_hash     bytea not null unique check (octet_length(token_hash) = 32),
  created_at     timestamptz not null default now(),
  expires_at     timestamptz not null,
  used_at        timestamptz,
  invalidated_at timestamptz
);

-- At most one open (unused, not invalidated) token per node and kind: reissuing invalidates the
-- previous one, and this makes a race between two reissues fail instead of leaving two open.
create unique index install_tokens_one_open_per_kind on install_tokens (node_id, kind)
  where used_at is null and invalidated_at is null;

create table node_credentials (
  id              uuid primary key default gen_random_uuid(),
  node_id         uuid not null references nodes (id),
  -- sha256 of the secret part of the opaque credential.
  secret_hash     bytea not null check (octet_length(secret_hash) = 32),
  issued_at       timestamptz not null default now(),
  expires_at      timestamptz not null,
  -- Null: valid until expires_at. Set when superseded by a rotation: the end of the handover window.
  valid_until     timestamptz,
  acknowledged_at timestamptz,
  revoked_at      timestamptz
);

create index node_credentials_node_idx on node_credentials (node_id, issued_at desc);
