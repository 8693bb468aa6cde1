-- The node gateway's TLS server identity and the control plane's signing keys (issue 3).
-- Private keys are stored only sealed with ZENOVA_SECRET_ENC_KEY (AES-256-GCM, see
-- control-plane/src/crypto/secret-box.ts): back up the database and that key together.

-- One row: the identity every gateway replica serves. Nodes trust ca_cert_pem, so the row is never
-- replaced silently; start-up refuses when a replica's local cache disagrees with it.
create table gateway_tls_identity (
  singleton     boolean primary key default true check (singleton),
  ca_cert_pem   text not null,
  cert_pem      text not null,
  key_encrypted bytea not null,
  -- The gateway hosts the certificate was generated (or imported) for; informational, the
  -- certificate's own SAN is what is checked.
  hosts         text[] not null,
  created_at    timestamptz not null default now(),
  not_after     timestamptz not null
);

-- Ed25519 keys the control plane signs with. kind 'config' signs config bundles; nodes receive the
-- public half at enrollment. At most one active key per kind; retired keys stay for the record.
create table signing_keys (
  id                    uuid primary key default gen_random_uuid(),
  kind                  text not null check (kind in ('config')),
  public_key_pem        text not null,
  private_key_encrypted bytea not null,
  created_at            timestamptz not null default now(),
  retired_at            timestamptz
);

create unique index signing_keys_one_active_per_kind on signing_keys (kind) where retired_at is null;
