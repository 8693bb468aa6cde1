/**
 * Model routes in PostgreSQL: create, list, find, replace, delete. Every upstream a route names
 * must be live; they are share-locked while the route is written, so an upstream cannot be deleted
 * from under a route being created. An unknown one is a 400 naming `targets[i].upstream` or
 * `fallbacks[i].upstream`, and so is one of the other API family than `targets[0]`'s: a node serves
 * an alias on one family's APIs only, and used to accept such a route and then answer every call
 * to it with ZN_ERR_MODEL_NOT_FOUND. Every write that changes something records a config version
 * in its transaction; a PUT that leaves the route as it is records none.
 */
import type pg from 'pg';
import { throwProblems } from '../config/config-fields.js';
import { withConfigChange, isUniqueViolation } from '../config/config-store.js';
import type { ConfigMutationResult } from '../config/config-store.js';
import { zenovaError } from '../errors.js';
import { checkIfMatch } from '../http/if-match.js';
import type { IfMatch } from '../http/if-match.js';
import type { Queryable } from '../nodes/with-transaction.js';
import { lockLiveUpstreamKinds } from '../upstreams/upstream-store.js';
import { API_FAMILY_NAMES, upstreamApiFamily } from '../upstreams/upstream-validation.js';
import type { ModelRouteCreateInput, ModelRouteSpec } from './model-route-validation.js';
import { modelRouteEtag } from './model-route-view.js';
import type { ModelRouteRow } from './model-route-view.js';

const COLUMNS = `id, alias, targets, fallbacks, timeout_ms as "timeoutMs", retries,
  created_at as "createdAt", updated_at as "updatedAt"`;

function notFound(alias: string): Error {
  return zenovaError('ZN_ERR_CP_ROUTE_NOT_FOUND', `No model route with alias '${alias}'.`);
}

/**
 * Refuses the spec when any target or fallback names an upstream that is not live, or one whose
 * API family differs from the first target's (weight 0 included: a PUT may weigh it in later).
 */
async function checkUpstreams(client: pg.PoolClient, spec: ModelRouteSpec): Promise<void> {
  const named = [
    ...spec.targets.map((t, i) => ({ field: `targets[${i}].upstream`, name: t.upstream })),
    ...spec.fallbacks.map((f, i) => ({ field: `fallbacks[${i}].upstream`, name: f.upstream })),
  ];
  const kinds = await lockLiveUpstreamKinds(client, named.map((n) => n.name));
  const unknown = named.filter((n) => !kinds.has(n.name)).map((n) => ({ field: n.field, rule: `no upstream named '${n.name}'` }));
  throwProblems(unknown);
  const first = named[0]!;
  const family = upstreamApiFamily(kinds.get(first.name)!);
  const mixed = named
    .filter((n) => upstreamApiFamily(kinds.get(n.name)!) !== family)
    .map((n) => ({
      field: n.field,
      rule: `'${n.name}' is an ${API_FAMILY_NAMES[upstreamApiFamily(kinds.get(n.name)!)]} upstream but ${first.field} '${first.name}' is ${API_FAMILY_NAMES[family]}: a route's targets and fallbacks must all be of one API family`,
    }));
  throwProblems(mixed);
}

/** Stored as the bundle wants them: targets always carry their weight. */
const targetsJson = (spec: ModelRouteSpec): string =>
  JSON.stringify(spec.targets.map((t) => ({ upstream: t.upstream, model: t.model, weight: t.weight })));
const fallbacksJson = (spec: ModelRouteSpec): string =>
  JSON.stringify(spec.fallbacks.map((f) => ({ upstream: f.upstream, model: f.model })));

export async function createModelRoute(pool: pg.Pool, input: ModelRouteCreateInput): Promise<ConfigMutationResult<ModelRouteRow>> {
  try {
    return await withConfigChange(pool, async (client) => {
      await checkUpstreams(client, input);
      const { rows } = await client.query<ModelRouteRow>(
        `insert into routes (alias, targets, fallbacks, timeout_ms, retries)
         values ($1, $2::jsonb, $3::jsonb, $4, $5) returning ${COLUMNS}`,
        [input.alias, targetsJson(input), fallbacksJson(input), input.timeoutMs, input.retries],
      );
      const route = rows[0]!;
      return { value: route, change: { entity: 'route', entityId: route.id, action: 'create' } };
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw zenovaError('ZN_ERR_CP_NAME_TAKEN', `alias: a model route with alias '${input.alias}' already exists`);
    throw err;
  }
}

export async function listModelRoutes(db: Queryable): Promise<ModelRouteRow[]> {
  const { rows } = await db.query<ModelRouteRow>(`select ${COLUMNS} from routes where deleted_at is null order by alias`);
  return rows;
}

export async function getModelRoute(db: Queryable, alias: string): Promise<ModelRouteRow> {
  const { rows } = await db.query<ModelRouteRow>(`select ${COLUMNS} from routes where alias = $1 and deleted_at is null`, [alias]);
  if (!rows[0]) throw notFound(alias);
  return rows[0];
}

/**
 * Whether `spec` would leave the stored route as it is (updatedAt included: it is not touched then).
 * Targets and fallbacks are lists in order (order is the fallback order and weighted rotation), so
 * they compare item by item.
 */
function routeUnchanged(current: ModelRouteRow, spec: ModelRouteSpec): boolean {
  return current.timeoutMs === spec.timeoutMs
    && current.retries === spec.retries
    && current.targets.length === spec.targets.length
    && spec.targets.every((t, i) => {
      const c = current.targets[i]!;
      return c.upstream === t.upstream && c.model === t.model && c.weight === t.weight;
    })
    && current.fallbacks.length === spec.fallbacks.length
    && spec.fallbacks.every((f, i) => {
      const c = current.fallbacks[i]!;
      return c.upstream === f.upstream && c.model === f.model;
    });
}

export async function replaceModelRoute(
  pool: pg.Pool, alias: string, spec: ModelRouteSpec, ifMatch?: IfMatch,
): Promise<ConfigMutationResult<ModelRouteRow>> {
  return withConfigChange(pool, async (client) => {
    const { rows: found } = await client.query<ModelRouteRow>(`select ${COLUMNS} from routes where alias = $1 and deleted_at is null for update`, [alias]);
    const current = found[0];
    if (current === undefined) throw notFound(alias);
    // Under the row lock until commit: a writer holding the same ETag waits here and is refused.
    checkIfMatch(ifMatch, modelRouteEtag(current));
    const id = current.id;
    // Checked before the comparison, so a body the API refuses is refused whatever is stored.
    await checkUpstreams(client, spec);
    if (routeUnchanged(current, spec)) return { value: current, change: null };
    const { rows } = await client.query<ModelRouteRow>(
      `update routes set targets = $2::jsonb, fallbacks = $3::jsonb, timeout_ms = $4, retries = $5, updated_at = now()
        where id = $1 returning ${COLUMNS}`,
      [id, targetsJson(spec), fallbacksJson(spec), spec.timeoutMs, spec.retries],
    );
    return { value: rows[0]!, change: { entity: 'route', entityId: id, action: 'update' } };
  });
}

export async function deleteModelRoute(pool: pg.Pool, alias: string, ifMatch?: IfMatch): Promise<ConfigMutationResult<ModelRouteRow>> {
  return withConfigChange(pool, async (client) => {
    const { rows } = await client.query<ModelRouteRow>(`select ${COLUMNS} from routes where alias = $1 and deleted_at is null for update`, [alias]);
    const route = rows[0];
    if (!route) throw notFound(alias);
    // Under the row lock until commit: an edit or delete holding the same ETag waits here and is refused.
    checkIfMatch(ifMatch, modelRouteEtag(route));
    await client.query('update routes set deleted_at = now() where id = $1', [route.id]);
    return { value: route, change: { entity: 'route', entityId: route.id, action: 'delete' } };
  });
}
