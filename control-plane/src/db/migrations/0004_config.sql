-- The config model nodes serve from (issue 4): accounts, API keys, upstreams, model routes,
-- rate-limit and guardrail policies, prices, and the config version every change bumps.
-- Named things are soft-deleted (deleted_at) so references from older rows keep pointing at a row,
-- and a name is unique among live rows only, so it can be used again after a delete.

-- One row per config change; its version is the config version after the change. Writers take
-- an advisory lock before inserting (control-plane/src/config/config-changes.ts), so versions
-- commit in order and a snapshot that sees version N sees every change up to N and none after.
create table config_changes (
  version    bigserial primary key,
  changed_at timestamptz not null default now(),
  entity     text not null,
  entity_id  text,
  action     text not null
);

-- The first config version is 1: the empty config every installation starts with.
insert into config_changes (entity, entity_id, action) values ('installation', null, 'initial');

create table rate_limit_policies (
  id                  uuid primary key default gen_random_uuid(),
  name                text not null check (name ~ '^[A-Za-z0-9._:/-]{1,128}$'),
  -- Null: no limit of that kind. Bounds match the bundle schema (proto/src/config-bundle.ts).
  requests_per_minute integer check (requests_per_minute between 1 and 10000000),
  tokens_per_minute   bigint check (tokens_per_minute between 1 and 10000000000),
  concurrent_requests integer check (concurrent_requests between 1 and 100000),
  created_at          timestamptz not null default now(),
  deleted_at          timestamptz
);
create unique index rate_limit_policies_live_name_key on rate_limit_policies (name) where deleted_at is null;

create table guardrail_policies (
  id         uuid primary key default gen_random_uuid(),
  name       text not null check (name ~ '^[A-Za-z0-9._:/-]{1,128}$'),
  -- The bundle's rules array, validated by the API against the bundle schema.
  rules      jsonb not null default '[]'::jsonb check (jsonb_typeof(rules) = 'array'),
  created_at timestamptz not null default now(),
  deleted_at timestamptz
);
create unique index guardrail_policies_live_name_key on guardrail_policies (name) where deleted_at is null;

create table accounts (
  id                   uuid primary key default gen_random_uuid(),
  name                 text not null check (name ~ '^[A-Za-z0-9._:/-]{1,128}$'),
  status               text not null default 'active' check (status in ('active', 'suspended')),
  rate_limit_policy_id uuid references rate_limit_policies (id),
  created_at           timestamptz not null default now(),
  deleted_at           timestamptz
);
create unique index accounts_live_name_key on accounts (name) where deleted_at is null;

create table api_keys (
  id                   uuid primary key default gen_random_uuid(),
  account_id           uuid not null references accounts (id),
  name                 text not null check (name ~ '^[A-Za-z0-9._:/-]{1,128}$'),
  -- sha256 of the secret; the secret itself is shown once and never stored.
  key_hash             bytea not null unique check (octet_length(key_hash) = 32),
  -- The first characters of the secret, so an operator can tell keys apart.
  key_prefix           text not null,
  -- Null: every model alias. Otherwise the aliases this key may call.
  allowed_models       text[],
  expires_at           timestamptz,
  status               text not null default 'active' check (status in ('active', 'revoked')),
  rate_limit_policy_id uuid references rate_limit_policies (id),
  guardrail_policy_id  uuid references guardrail_policies (id),
  created_at           timestamptz not null default now(),
  revoked_at           timestamptz,
  check ((status = 'revoked') = (revoked_at is not null))
);
create index api_keys_account_idx on api_keys (account_id, created_at);

create table upstreams (
  id               uuid primary key default gen_random_uuid(),
  name             text not null check (name ~ '^[A-Za-z0-9._:/-]{1,128}$'),
  kind             text not null check (kind in ('openai', 'anthropic', 'openai-compatible')),
  base_url         text not null check (base_url ~ '^https?://'),
  -- The provider's API key sealed with ZENOVA_SECRET_ENC_KEY (context 'upstream-secret:<id>');
  -- null when the upstream needs none.
  secret_encrypted bytea,
  timeout_ms       integer not null default 60000 check (timeout_ms between 100 and 600000),
  created_at       timestamptz not null default now(),
  deleted_at       timestamptz
);
create unique index upstreams_live_name_key on upstreams (name) where deleted_at is null;

create table routes (
  id         uuid primary key default gen_random_uuid(),
  alias      text not null check (alias ~ '^[A-Za-z0-9._:/-]{1,128}$'),
  -- [{upstream: <upstream name>, model, weight}], at least one.
  targets    jsonb not null check (jsonb_typeof(targets) = 'array' and jsonb_array_length(targets) >= 1),
  -- [{upstream, model}], tried in order when the chosen target fails.
  fallbacks  jsonb not null default '[]'::jsonb check (jsonb_typeof(fallbacks) = 'array'),
  timeout_ms integer not null default 60000 check (timeout_ms between 100 and 600000),
  retries    integer not null default 0 check (retries between 0 and 5),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  deleted_at timestamptz
);
create unique index routes_live_alias_key on routes (alias) where deleted_at is null;

-- Integer micro-units of the account currency; never floats.
create table prices (
  model                   text primary key check (model ~ '^[A-Za-z0-9._:/-]{1,128}$'),
  input_micros_per_token  bigint not null check (input_micros_per_token >= 0),
  output_micros_per_token bigint not null check (output_micros_per_token >= 0),
  request_micros          bigint not null default 0 check (request_micros >= 0),
  updated_at              timestamptz not null default now()
);

-- What each node has applied, from its config acks: configVersionsBehind and `config-synced` are
-- derived from these. config_error: {version, code, message, at} of the last refused push.
alter table nodes
  add column applied_config_version bigint,
  add column config_synced_at       timestamptz,
  add column config_error           jsonb check (config_error is null or jsonb_typeof(config_error) = 'object');
