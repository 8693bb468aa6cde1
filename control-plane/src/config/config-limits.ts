/**
 * The node bundle's limits, enforced when a change is made instead of found out when a bundle is
 * built: a change the admin API accepted but no bundle can carry stops config reaching EVERY node
 * (BundleBuildError fleet-wide), later key revocations included.
 *
 * Checked in the change's own transaction, after its writes and under the config-change lock
 * (config-changes.ts), so nothing else commits before it does: per fleet-wide kind at most
 * MAX_BUNDLE_ITEMS, counted as the bundle counts them (revoked keys included, upstreams only when a
 * route names them); and the bundle at most MAX_CONFIG_BUNDLE_BYTES, NODE_PART_BYTES of which are
 * kept for each node's own part. A change is measured against the config before it: one that grows
 * nothing past a limit goes through even when the config is already past one (stored before the
 * limits were enforced), so removing a leaked key, say, is never refused.
 *
 * The bytes are an upper bound summed in SQL, without reading rows out or opening secrets (building
 * the bundle to measure it took ~100 ms at 5 000 keys, under the lock every change waits for; this
 * ~5 ms, and ~25 ms at 25 000, near where keys alone fill 8 MiB): per
 * row, the canonical JSON of an element with every variable field at its shortest, plus what the
 * row's fields add. Exact for accounts, keys and prices (their names cannot need JSON escapes: see
 * the tables' check constraints); over for the rest: stored JSON (guardrail rules, route targets) is
 * counted as PostgreSQL prints it, with spaces, and a secret as twice its sealed length. Every key
 * counts as revoked and every account as suspended, the longer words, so that revoking and
 * suspending, which are never refused, cannot take a bundle past the limit.
 */
import type pg from 'pg';
import { MAX_BUNDLE_ITEMS, MAX_CONFIG_BUNDLE_BYTES, canonicalJson } from '../../../proto/src/index.js';
import { zenovaError } from '../errors.js';
import type { FleetConfig } from './bundle-builder.js';

export type FleetKind = keyof FleetConfig;

/** Kept in every bundle for the node's own part (id, name, settings, issuedAt, version) and the framing. */
export const NODE_PART_BYTES = 4096;
/** What the fleet-wide parts of a bundle may take together. */
export const MAX_FLEET_BYTES = MAX_CONFIG_BUNDLE_BYTES - NODE_PART_BYTES;

const KIND_NAMES: Record<FleetKind, string> = {
  accounts: 'accounts',
  apiKeys: 'API keys (revoked ones included: nodes keep them to tell revoked from unknown)',
  upstreams: 'upstreams named by model routes',
  routes: 'model routes',
  guardrailPolicies: 'guardrail policies',
  prices: 'prices',
  toolServers: 'tool servers',
};

const bytesOf = (value: unknown): number => Buffer.byteLength(canonicalJson(value), 'utf8');

const UUID = '00000000-0000-0000-0000-000000000000';
const NULL_BYTES = bytesOf(null);
/** What a uuid, and an ISO time of a four-digit year, add in place of null. */
const ID_OVER_NULL = bytesOf(UUID) - NULL_BYTES;
const TIME_OVER_NULL = bytesOf('9999-12-31T23:59:59.999Z') - NULL_BYTES;

const TEMPLATE_UPSTREAM_KIND = 'openai';
/** What a key's allowedToolServers adds when it is set (it is left out when null): `,"allowedToolServers":` before the list. */
const TOOL_SERVERS_FIELD_BYTES = bytesOf('allowedToolServers') + 2;

type Element<K extends FleetKind> = Required<FleetConfig[K][number]>;

// One element of each kind with every variable field at its shortest ('' / 0 / null / {} / []).
// `satisfies` keeps them whole: a field added to the bundle fails to compile here until counted.
const TEMPLATE_BYTES: Record<FleetKind, number> = {
  accounts: bytesOf({ id: UUID, name: '', status: 'suspended', limits: {} } satisfies Element<'accounts'>),
  // allowedToolServers at its shortest is absent (the builder leaves a null out): counted per row below.
  apiKeys: bytesOf({
    id: UUID, accountId: UUID, name: '', sha256: '0'.repeat(64), allowedModels: null, expiresAt: null,
    status: 'revoked', limits: {}, guardrailPolicyId: null,
  } satisfies Omit<Element<'apiKeys'>, 'allowedToolServers'>),
  upstreams: bytesOf({ id: UUID, name: '', kind: TEMPLATE_UPSTREAM_KIND, baseUrl: '', apiKey: null, timeoutMs: 0 } satisfies Element<'upstreams'>),
  routes: bytesOf({ alias: '', targets: [], fallbacks: [], timeoutMs: 0, retries: 0 } satisfies Element<'routes'>),
  guardrailPolicies: bytesOf({ id: UUID, name: '', rules: [] } satisfies Element<'guardrailPolicies'>),
  prices: bytesOf({ model: '', inputMicrosPerToken: 0, outputMicrosPerToken: 0, requestMicros: 0 } satisfies Element<'prices'>),
  toolServers: bytesOf({ name: '', url: '', apiKey: null, timeoutMs: 0, callMicros: 0 } satisfies Element<'toolServers'>),
};

// Per kind, how many elements and what their fields add to the template. Names, aliases and models
// match ^[A-Za-z0-9._:/-]+$ (check constraints): one byte each in JSON. A number adds its digits
// less the template's 0; text that may need escapes is measured with to_json.
const FOOTPRINT_SQL = `
with policy_limits as (
  select p.id, octet_length(json_strip_nulls(row_to_json(l))::text) - 2 as extra
    from rate_limit_policies p
    cross join lateral (select p.requests_per_minute as "requestsPerMinute", p.tokens_per_minute as "tokensPerMinute",
                               p.concurrent_requests as "concurrentRequests") l
   where p.deleted_at is null
), used_upstreams as (
  select distinct t->>'upstream' as name
    from routes r cross join lateral jsonb_array_elements(r.targets || r.fallbacks) t
   where r.deleted_at is null
)
select 'accounts' as kind, count(*)::int as count,
       coalesce(sum(octet_length(a.name) + coalesce(pl.extra, 0)), 0)::bigint as extra
  from accounts a left join policy_limits pl on pl.id = a.rate_limit_policy_id
 where a.deleted_at is null
union all
select 'apiKeys', count(*)::int, coalesce(sum(
         octet_length(k.name)
         + case when k.allowed_models is null then 0 else octet_length(array_to_json(k.allowed_models)::text) - ${NULL_BYTES} end
         + case when k.allowed_tool_servers is null then 0
                else ${TOOL_SERVERS_FIELD_BYTES} + octet_length(array_to_json(k.allowed_tool_servers)::text) end
         + case when k.expires_at is null then 0 else ${TIME_OVER_NULL} end
         + case when g.id is null then 0 else ${ID_OVER_NULL} end
         + coalesce(pl.extra, 0)), 0)::bigint
  from api_keys k
  join accounts a on a.id = k.account_id and a.deleted_at is null
  left join policy_limits pl on pl.id = k.rate_limit_policy_id
  left join guardrail_policies g on g.id = k.guardrail_policy_id and g.deleted_at is null
union all
select 'upstreams', count(*)::int, coalesce(sum(
         octet_length(u.name) + octet_length(u.kind) - ${TEMPLATE_UPSTREAM_KIND.length} + octet_length(to_json(u.base_url)::text) - 2
         + coalesce(2 * octet_length(u.secret_encrypted) - ${NULL_BYTES}, 0) + length(u.timeout_ms::text) - 1), 0)::bigint
  from upstreams u
 where u.deleted_at is null and u.name in (select name from used_upstreams)
union all
select 'routes', count(*)::int, coalesce(sum(
         octet_length(r.alias) + octet_length(r.targets::text) - 2 + octet_length(r.fallbacks::text) - 2
         + length(r.timeout_ms::text) - 1 + length(r.retries::text) - 1), 0)::bigint
  from routes r
 where r.deleted_at is null
union all
select 'guardrailPolicies', count(*)::int, coalesce(sum(octet_length(g.name) + octet_length(g.rules::text) - 2), 0)::bigint
  from guardrail_policies g
 where g.deleted_at is null
union all
select 'prices', count(*)::int, coalesce(sum(
         octet_length(p.model) + length(p.input_micros_per_token::text) - 1 + length(p.output_micros_per_token::text) - 1
         + length(p.request_micros::text) - 1), 0)::bigint
  from prices p
union all
select 'toolServers', count(*)::int, coalesce(sum(
         octet_length(s.name) + octet_length(to_json(s.url)::text) - 2
         + coalesce(2 * octet_length(s.secret_encrypted) - ${NULL_BYTES}, 0)
         + length(s.timeout_ms::text) - 1 + length(s.call_micros::text) - 1), 0)::bigint
  from tool_servers s
 where s.deleted_at is null`;

export interface FleetFootprint {
  /** Per kind: how many the bundle would carry, and at most how many bytes its `"kind":[…]` takes. */
  kinds: Record<FleetKind, { count: number; bytes: number }>;
  /** At most how many bytes the fleet-wide parts take together. */
  bytes: number;
}

type FootprintRow = { kind: FleetKind; count: number; extra: string };

/** The fleet-wide parts' counts and size bound, as of the caller's snapshot. */
export async function fleetFootprint(db: pg.ClientBase | pg.Pool): Promise<FleetFootprint> {
  // Named: each connection plans it once.
  const { rows } = await db.query<FootprintRow>({ name: 'zenova-fleet-footprint', text: FOOTPRINT_SQL });
  return footprintOf(rows);
}

function footprintOf(rows: FootprintRow[]): FleetFootprint {
  const kinds = {} as FleetFootprint['kinds'];
  let total = 0;
  for (const row of rows) {
    const elements = row.count * TEMPLATE_BYTES[row.kind] + Number(row.extra) + Math.max(0, row.count - 1);
    const bytes = bytesOf(row.kind) + 1 + 2 + elements; // "kind":[…]
    kinds[row.kind] = { count: row.count, bytes };
    total += bytes;
  }
  return { kinds, bytes: total };
}

const BEFORE_CURSOR = 'zenova_footprint_before_change';

/**
 * Keeps the footprint as the caller's transaction stands now, to be measured later only if asked
 * for. Call it before the change's writes, in the same transaction. A cursor keeps the snapshot it
 * is declared in (the transaction's later writes unseen) and runs its query only when fetched: one
 * round trip for every change, and the measuring (~5 ms, ~25 ms at 25 000 keys) only for the rare
 * change that leaves the config past a limit. The snapshot is taken before the config-change lock
 * (taking that lock before a change's writes would reverse the lock order: config-changes.ts), so
 * it may miss a change committed meanwhile; one that grew was itself held to the limits.
 */
export async function footprintBeforeChange(client: pg.ClientBase): Promise<() => Promise<FleetFootprint>> {
  await client.query(`declare ${BEFORE_CURSOR} no scroll cursor for ${FOOTPRINT_SQL}`);
  return async () => footprintOf((await client.query<FootprintRow>(`fetch all from ${BEFORE_CURSOR}`)).rows);
}

const formatNumber = (n: number): string => n.toLocaleString('en-US');

const overLimits = (footprint: FleetFootprint): boolean => footprint.bytes > MAX_FLEET_BYTES
  || (Object.entries(footprint.kinds) as Array<[FleetKind, { count: number }]>).some(([kind, { count }]) => count > MAX_BUNDLE_ITEMS[kind]);

/**
 * Refuses (ZN_ERR_CP_CONFIG_LIMIT, naming the kind and the limit) a change that takes a kind's
 * count past its limit, or the bundle's bytes past theirs: the config as it stands in the caller's
 * transaction against `before`, the config before the change. A config already past a limit
 * (stored before the limits were enforced) takes every change that does not make it worse, so a
 * leaked key can still be removed from it. Call it under the config-change lock.
 */
export async function checkBundleLimits(client: pg.ClientBase, before: () => Promise<FleetFootprint>): Promise<void> {
  const after = await fleetFootprint(client);
  if (!overLimits(after)) return;
  const was = await before();
  for (const [kind, { count }] of Object.entries(after.kinds) as Array<[FleetKind, { count: number }]>) {
    const max = MAX_BUNDLE_ITEMS[kind];
    const had = was.kinds[kind].count;
    if (count > max && count > had) {
      throw zenovaError('ZN_ERR_CP_CONFIG_LIMIT',
        `${kind}: nodes take at most ${formatNumber(max)} ${KIND_NAMES[kind]}, and this change would make ${formatNumber(count)}`
        + `${had > max ? ` (there are ${formatNumber(had)} now)` : ''}; delete some first.`);
    }
  }
  if (after.bytes > MAX_FLEET_BYTES && after.bytes > was.bytes) {
    const largest = (Object.entries(after.kinds) as Array<[FleetKind, { bytes: number }]>)
      .sort(([, a], [, b]) => b.bytes - a.bytes)
      .slice(0, 2)
      .map(([kind, { bytes }]) => `${KIND_NAMES[kind]} ${formatNumber(bytes)} bytes`)
      .join(', ');
    const grew = (Object.entries(after.kinds) as Array<[FleetKind, { bytes: number }]>)
      .filter(([kind, { bytes }]) => bytes > was.kinds[kind].bytes)
      .map(([kind]) => KIND_NAMES[kind])
      .join(', ');
    throw zenovaError('ZN_ERR_CP_CONFIG_LIMIT',
      `the config bundle nodes get would take up to ${formatNumber(after.bytes)} bytes, over the ${formatNumber(MAX_FLEET_BYTES)} it may hold `
      + `(${formatNumber(MAX_CONFIG_BUNDLE_BYTES)} less ${formatNumber(NODE_PART_BYTES)} for each node's own part); largest: ${largest}. `
      + `This change adds ${formatNumber(after.bytes - was.bytes)} bytes (to ${grew}). Delete or shrink something first.`);
  }
}
