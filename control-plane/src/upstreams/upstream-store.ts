/**
 * Upstreams in PostgreSQL: create, list, find, patch (never the kind), delete (refused while a live
 * route names the upstream), and the locked look-up routes use. The provider secret is sealed
 * before it is written and never read back here. Every write that changes something records a
 * config version in its transaction; a patch that leaves the upstream as it is records none.
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { withConfigChange, isUniqueViolation } from '../config/config-store.js';
import type { ConfigMutationResult } from '../config/config-store.js';
import type { SecretBox } from '../crypto/secret-box.js';
import { zenovaError } from '../errors.js';
import { checkIfMatch } from '../http/if-match.js';
import type { IfMatch } from '../http/if-match.js';
import type { Queryable } from '../nodes/with-transaction.js';
import { sealUpstreamSecret } from './upstream-secret.js';
import type { UpstreamCreateInput, UpstreamKind, UpstreamPatch } from './upstream-validation.js';
import { upstreamEtag } from './upstream-view.js';
import type { UpstreamRow } from './upstream-view.js';

const COLUMNS = `id, name, kind, base_url as "baseUrl", secret_encrypted is not null as "hasApiKey",
  timeout_ms as "timeoutMs", created_at as "createdAt", encode(sha256(secret_encrypted), 'base64') as "secretDigest"`;
const MAX_ROUTES_IN_MESSAGE = 10;

function notFound(name: string): Error {
  return zenovaError('ZN_ERR_CP_UPSTREAM_NOT_FOUND', `No upstream named '${name}'.`);
}

export async function createUpstream(
  pool: pg.Pool, secretBox: SecretBox | undefined, input: UpstreamCreateInput,
): Promise<ConfigMutationResult<UpstreamRow>> {
  // The id is chosen here because the seal binds it (see upstream-secret.ts).
  const id = randomUUID();
  const sealed = input.apiKey === undefined ? null : sealUpstreamSecret(secretBox, id, input.apiKey);
  try {
    return await withConfigChange(pool, async (client) => {
      const { rows } = await client.query<UpstreamRow>(
        `insert into upstreams (id, name, kind, base_url, secret_encrypted, timeout_ms)
         values ($1, $2, $3, $4, $5, $6) returning ${COLUMNS}`,
        [id, input.name, input.kind, input.baseUrl, sealed, input.timeoutMs],
      );
      return { value: rows[0]!, change: { entity: 'upstream', entityId: id, action: 'create' } };
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw zenovaError('ZN_ERR_CP_NAME_TAKEN', `name: an upstream named '${input.name}' already exists`);
    throw err;
  }
}

export async function listUpstreams(db: Queryable): Promise<UpstreamRow[]> {
  const { rows } = await db.query<UpstreamRow>(`select ${COLUMNS} from upstreams where deleted_at is null order by name`);
  return rows;
}

export async function getUpstream(db: Queryable, name: string): Promise<UpstreamRow> {
  const { rows } = await db.query<UpstreamRow>(`select ${COLUMNS} from upstreams where name = $1 and deleted_at is null`, [name]);
  if (!rows[0]) throw notFound(name);
  return rows[0];
}

/**
 * The kind of each of `names` that is a live upstream, share-locked until the caller's transaction
 * ends: a concurrent delete waits for the caller's route to commit (and then refuses), or wins
 * first (and the caller sees the upstream gone, or the kind of one re-created under that name).
 * A kind is never changed in place, so the kinds read here hold until the route commits.
 */
export async function lockLiveUpstreamKinds(client: pg.PoolClient, names: readonly string[]): Promise<Map<string, UpstreamKind>> {
  const { rows } = await client.query<{ name: string; kind: UpstreamKind }>(
    'select name, kind from upstreams where name = any($1::text[]) and deleted_at is null order by name for share',
    [[...new Set(names)]],
  );
  return new Map(rows.map((r) => [r.name, r.kind]));
}

/**
 * Whether `patch` would leave the stored upstream as it is (no new config version then). A given
 * key always counts as a change: seals use a random nonce, so the stored form cannot be compared,
 * and opening it here to compare plaintexts is not worth a repeated PATCH. Removing the key of an
 * upstream that has none changes nothing.
 */
function patchChangesNothing(current: UpstreamRow, patch: UpstreamPatch): boolean {
  return (patch.baseUrl === undefined || patch.baseUrl === current.baseUrl)
    && (patch.timeoutMs === undefined || patch.timeoutMs === current.timeoutMs)
    && (patch.apiKey === undefined || (patch.apiKey === null && !current.hasApiKey));
}

export async function patchUpstream(
  pool: pg.Pool, secretBox: SecretBox | undefined, name: string, patch: UpstreamPatch, ifMatch?: IfMatch,
): Promise<ConfigMutationResult<UpstreamRow>> {
  return withConfigChange(pool, async (client) => {
    const { rows: found } = await client.query<UpstreamRow>(`select ${COLUMNS} from upstreams where name = $1 and deleted_at is null for update`, [name]);
    const current = found[0];
    if (current === undefined) throw notFound(name);
    // Under the row lock until commit: a writer holding the same ETag waits here and is refused.
    checkIfMatch(ifMatch, upstreamEtag(current));
    if (patchChangesNothing(current, patch)) return { value: current, change: null };
    const id = current.id;
    const sealed = typeof patch.apiKey === 'string' ? sealUpstreamSecret(secretBox, id, patch.apiKey) : null;
    const { rows } = await client.query<UpstreamRow>(
      `update upstreams set
          base_url = coalesce($2, base_url),
          timeout_ms = coalesce($3, timeout_ms),
          secret_encrypted = case when $4::boolean then $5::bytea else secret_encrypted end
        where id = $1
        returning ${COLUMNS}`,
      [id, patch.baseUrl ?? null, patch.timeoutMs ?? null, patch.apiKey !== undefined, sealed],
    );
    return { value: rows[0]!, change: { entity: 'upstream', entityId: id, action: 'update' } };
  });
}

export async function deleteUpstream(pool: pg.Pool, name: string, ifMatch?: IfMatch): Promise<ConfigMutationResult<UpstreamRow>> {
  return withConfigChange(pool, async (client) => {
    const { rows } = await client.query<UpstreamRow>(`select ${COLUMNS} from upstreams where name = $1 and deleted_at is null for update`, [name]);
    const upstream = rows[0];
    if (!upstream) throw notFound(name);
    // Under the row lock until commit: an edit or delete holding the same ETag waits here and is refused.
    checkIfMatch(ifMatch, upstreamEtag(upstream));
    const { rows: users } = await client.query<{ alias: string }>(
      `select alias from routes
        where deleted_at is null
          and (targets @> jsonb_build_array(jsonb_build_object('upstream', $1::text))
               or fallbacks @> jsonb_build_array(jsonb_build_object('upstream', $1::text)))
        order by alias`,
      [name],
    );
    if (users.length > 0) {
      const shown = users.slice(0, MAX_ROUTES_IN_MESSAGE).map((r) => `'${r.alias}'`).join(', ');
      const more = users.length > MAX_ROUTES_IN_MESSAGE ? ` and ${users.length - MAX_ROUTES_IN_MESSAGE} more` : '';
      throw zenovaError('ZN_ERR_CP_UPSTREAM_IN_USE', `Upstream '${name}' is used by route(s) ${shown}${more}; change or delete them first.`);
    }
    await client.query('update upstreams set deleted_at = now() where id = $1', [upstream.id]);
    return { value: upstream, change: { entity: 'upstream', entityId: upstream.id, action: 'delete' } };
  });
}
