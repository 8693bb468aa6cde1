/**
 * Tool servers in PostgreSQL: put (create or replace), list, find, delete. The secret is sealed
 * before it is written and never read back here. Every write that changes something records a
 * config version in its transaction, so nodes get a new bundle; a PUT that leaves the server as it
 * is records none.
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import type { ConfigEntity } from '../config/config-changes.js';
import { isUniqueViolation, withConfigChange } from '../config/config-store.js';
import type { ConfigMutationResult } from '../config/config-store.js';
import type { SecretBox } from '../crypto/secret-box.js';
import { zenovaError } from '../errors.js';
import { checkIfMatch } from '../http/if-match.js';
import type { IfMatch } from '../http/if-match.js';
import type { Queryable } from '../nodes/with-transaction.js';
import { sealToolServerSecret } from './tool-server-secret.js';
import type { ToolServerInput } from './tool-server-validation.js';
import { toolServerEtag } from './tool-server-view.js';
import type { ToolServerRow } from './tool-server-view.js';

const COLUMNS = `id, name, url, secret_encrypted is not null as "hasApiKey", timeout_ms as "timeoutMs",
  call_micros::text as "callMicros", created_at as "createdAt", updated_at as "updatedAt",
  encode(sha256(secret_encrypted), 'base64') as "secretDigest"`;

// config_changes.entity is free text; ConfigEntity (config-changes.ts, the lead's) does not list
// tool servers yet, hence the widening.
const ENTITY: ConfigEntity = 'tool-server';

export interface PutToolServerResult {
  row: ToolServerRow;
  created: boolean;
}

function notFound(name: string): Error {
  return zenovaError('ZN_ERR_CP_TOOL_SERVER_NOT_FOUND', `No tool server named '${name}'.`);
}

/**
 * Whether `input` would leave the stored server as it is (updatedAt included: it is not touched
 * then). A given key always counts as a change: seals use a random nonce, so the stored form cannot
 * be compared. Removing the key of a server that has none changes nothing.
 */
function putChangesNothing(current: ToolServerRow, input: ToolServerInput): boolean {
  return current.url === input.url
    && current.timeoutMs === input.timeoutMs
    // callMicros is a bigint, read as text; the input is a safe integer, so the decimal forms compare.
    && current.callMicros === String(input.callMicros)
    && (input.apiKey === undefined || (input.apiKey === null && !current.hasApiKey));
}

/**
 * Creates `name` or replaces its url, timeout and price. The key: a string sets it, null removes
 * it, undefined keeps what is stored (nothing, for a new server).
 */
export async function putToolServer(
  pool: pg.Pool, secretBox: SecretBox | undefined, name: string, input: ToolServerInput, ifMatch?: IfMatch,
): Promise<ConfigMutationResult<PutToolServerResult>> {
  const attempt = (): Promise<ConfigMutationResult<PutToolServerResult>> => withConfigChange<PutToolServerResult>(pool, async (client) => {
    const { rows: found } = await client.query<ToolServerRow>(
      `select ${COLUMNS} from tool_servers where name = $1 and deleted_at is null for update`, [name],
    );
    const current = found[0];
    // Under the row lock until commit: a writer holding the same ETag waits here and is refused.
    // No row: a PUT that would create, which no If-Match matches; so one with If-Match never
    // inserts, nor meets the create race retried below.
    checkIfMatch(ifMatch, current === undefined ? undefined : toolServerEtag(current));
    if (current !== undefined && putChangesNothing(current, input)) return { value: { row: current, created: false }, change: null };
    const existing = current?.id;
    // The id is chosen here because the seal binds it (see tool-server-secret.ts).
    const id = existing ?? randomUUID();
    const sealed = typeof input.apiKey === 'string' ? sealToolServerSecret(secretBox, id, input.apiKey) : null;
    if (existing === undefined) {
      const { rows } = await client.query<ToolServerRow>(
        `insert into tool_servers (id, name, url, secret_encrypted, timeout_ms, call_micros)
         values ($1, $2, $3, $4, $5, $6) returning ${COLUMNS}`,
        [id, name, input.url, sealed, input.timeoutMs, input.callMicros],
      );
      return { value: { row: rows[0]!, created: true }, change: { entity: ENTITY, entityId: id, action: 'create' } };
    }
    const { rows } = await client.query<ToolServerRow>(
      `update tool_servers set
          url = $2, timeout_ms = $3, call_micros = $4,
          secret_encrypted = case when $5::boolean then $6::bytea else secret_encrypted end,
          updated_at = now()
        where id = $1
        returning ${COLUMNS}`,
      [id, input.url, input.timeoutMs, input.callMicros, input.apiKey !== undefined, sealed],
    );
    return { value: { row: rows[0]!, created: false }, change: { entity: ENTITY, entityId: id, action: 'update' } };
  });
  try {
    return await attempt();
  } catch (err) {
    // Two PUTs creating the same name at once: the loser finds the winner's row and replaces it.
    if (isUniqueViolation(err)) return attempt();
    throw err;
  }
}

export async function listToolServers(db: Queryable): Promise<ToolServerRow[]> {
  const { rows } = await db.query<ToolServerRow>(`select ${COLUMNS} from tool_servers where deleted_at is null order by name`);
  return rows;
}

export async function getToolServer(db: Queryable, name: string): Promise<ToolServerRow> {
  const { rows } = await db.query<ToolServerRow>(`select ${COLUMNS} from tool_servers where name = $1 and deleted_at is null`, [name]);
  if (!rows[0]) throw notFound(name);
  return rows[0];
}

export async function deleteToolServer(pool: pg.Pool, name: string, ifMatch?: IfMatch): Promise<ConfigMutationResult<ToolServerRow>> {
  return withConfigChange(pool, async (client) => {
    const { rows } = await client.query<ToolServerRow>(
      `select ${COLUMNS} from tool_servers where name = $1 and deleted_at is null for update`, [name],
    );
    const row = rows[0];
    if (!row) throw notFound(name);
    // Under the row lock until commit: an edit or delete holding the same ETag waits here and is refused.
    checkIfMatch(ifMatch, toolServerEtag(row));
    await client.query('update tool_servers set deleted_at = now() where id = $1', [row.id]);
    return { value: row, change: { entity: ENTITY, entityId: row.id, action: 'delete' } };
  });
}
