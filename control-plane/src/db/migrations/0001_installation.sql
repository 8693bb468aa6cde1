-- The installation: one row, created with the schema, whose id identifies this control plane
-- (reported by /api/version; later issues tie nodes and signed bundles to it).
create table installation (
  id         uuid primary key default gen_random_uuid(),
  created_at timestamptz not null default now(),
  -- Always true and unique: a second row cannot exist.
  singleton  boolean not null default true unique check (singleton)
);

insert into installation default values;
