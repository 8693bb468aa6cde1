/**
 * `Idempotency-Key` on `POST /api/v1/api-keys` (docs/api.md, "Retrying a create"). The key's
 * secret is shown once and stored only as a hash, so a retry cannot be given the first answer
 * again: the create claims (route, SHA-256 of the key) in `admin_idempotency_keys` (migration 0022)
 * in its own transaction, before anything else, and a later request with the same key and body,
 * within 24 h, creates nothing and is refused `409 ZN_ERR_CP_IDEMPOTENT_REPLAY` naming the key the
 * first one created (revoke it and create anew if its secret was lost); the same key with another
 * body is `422 ZN_ERR_CP_IDEMPOTENCY_KEY_REUSED`. The claim is an insert on the primary key, so two
 * requests sent at the same moment wait on each other's row, and the second sees the first's
 * claim once it commits (or takes the key over if it rolled back). No plaintext secret is stored.
 * The admin API has one identity (the admin token; console sessions are opened with it), so keys
 * are per route, not per caller.
 */
import { createHash } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { canonicalJson } from '../../../proto/src/config-bundle.js';
import { ZenovaError, zenovaError } from '../errors.js';
import type { ApiKeyRow } from './api-key-view.js';

export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
/** How long a claim holds: a retry after that is a new request. */
export const IDEMPOTENCY_RETENTION_HOURS = 24;
/** The claims' route value for key creates. */
export const API_KEY_CREATE_ROUTE = 'POST /api/v1/api-keys';

const IDEMPOTENCY_KEY_RULE = `must be 1 to ${MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII characters (space to ~), sent once`;

export const idempotencyKeySchema = z.string()
  .min(1, { error: () => IDEMPOTENCY_KEY_RULE })
  .max(MAX_IDEMPOTENCY_KEY_LENGTH, { error: () => IDEMPOTENCY_KEY_RULE })
  .regex(/^[\x20-\x7e]+$/, { error: () => IDEMPOTENCY_KEY_RULE });

/** What a create remembers of its request: hashes only. */
export interface IdempotencyClaim {
  /** SHA-256 of the Idempotency-Key. */
  keyHash: Buffer;
  /** SHA-256 of the request body's canonical JSON (key order and white space aside). */
  requestHash: Buffer;
}

const sha256 = (text: string): Buffer => createHash('sha256').update(text, 'utf8').digest();

/**
 * The request's Idempotency-Key as a claim on `body`, or undefined when it sent none (the create
 * then runs as it always did). A key sent twice (Node would join the copies with ", "), empty,
 * longer than 255 characters or with other than printable ASCII is a 400: never read as another key.
 */
export function idempotencyClaimOf(request: FastifyRequest, body: unknown): IdempotencyClaim | undefined {
  const raw = request.raw.rawHeaders;
  let copies = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === IDEMPOTENCY_KEY_HEADER) copies += 1;
  const value = request.headers[IDEMPOTENCY_KEY_HEADER];
  if (copies === 0 && value === undefined) return undefined;
  const parsed = idempotencyKeySchema.safeParse(value);
  if (copies > 1 || !parsed.success) {
    // Never the value itself: a caller may have pasted something else there.
    throw zenovaError('ZN_ERR_CP_IDEMPOTENCY_KEY_INVALID', `Idempotency-Key: ${IDEMPOTENCY_KEY_RULE}.`);
  }
  return { keyHash: sha256(parsed.data), requestHash: sha256(canonicalJson(body)) };
}

/** A retry of a create that already ran: carries what it created (never a secret) for the answer. */
export class IdempotentReplayError extends ZenovaError {
  readonly apiKey: ApiKeyRow;

  constructor(apiKey: ApiKeyRow) {
    super(
      'ZN_ERR_CP_IDEMPOTENT_REPLAY',
      `Idempotency-Key already used: an earlier request with this key and body created API key ${apiKey.id} ` +
        `(prefix ${apiKey.prefix}, ${apiKey.createdAt.toISOString()}); nothing was created now. Its secret was shown only ` +
        `in that answer and cannot be shown again: if that answer was lost, revoke the key ` +
        `(POST /api/v1/api-keys/${apiKey.id}/revoke) and create a new one with a new Idempotency-Key.`,
    );
    this.name = 'IdempotentReplayError';
    this.apiKey = apiKey;
  }
}

/**
 * Claims `claim` for `route` in the caller's transaction: `{ claimed: true }` when this request is
 * the first with the key (or the last claim expired), else what the earlier request created. Waits
 * on a claim another transaction holds uncommitted. The same key with another body is a 422.
 */
export async function claimIdempotencyKey(
  client: pg.PoolClient, route: string, claim: IdempotencyClaim,
): Promise<{ claimed: true } | { claimed: false; resourceId: string }> {
  const { rowCount } = await client.query(
    `insert into admin_idempotency_keys (route, key_hash, request_hash, expires_at)
     values ($1, $2, $3, now() + make_interval(hours => $4))
     on conflict (route, key_hash) do update
       set request_hash = excluded.request_hash, resource_id = null, created_at = now(), expires_at = excluded.expires_at
       where admin_idempotency_keys.expires_at <= now()`,
    [route, claim.keyHash, claim.requestHash, IDEMPOTENCY_RETENTION_HOURS],
  );
  if (rowCount === 1) return { claimed: true };
  // A live claim of another transaction, committed: this statement's snapshot sees it.
  const { rows } = await client.query<{ requestHash: Buffer; resourceId: string | null }>(
    `select request_hash as "requestHash", resource_id as "resourceId" from admin_idempotency_keys where route = $1 and key_hash = $2`,
    [route, claim.keyHash],
  );
  const earlier = rows[0];
  if (earlier === undefined || earlier.resourceId === null) {
    // A claim is written with what it created in one transaction, and swept only once expired.
    throw new Error('an idempotency claim without what it created');
  }
  if (!earlier.requestHash.equals(claim.requestHash)) {
    throw zenovaError(
      'ZN_ERR_CP_IDEMPOTENCY_KEY_REUSED',
      `Idempotency-Key already used with another request body in the last ${IDEMPOTENCY_RETENTION_HOURS} h; nothing was created. ` +
        'A retry sends the same body; a new request needs a new Idempotency-Key.',
    );
  }
  return { claimed: false, resourceId: earlier.resourceId };
}

/** Records what the claiming request created, in its transaction. */
export async function completeIdempotencyClaim(client: pg.PoolClient, route: string, claim: IdempotencyClaim, resourceId: string): Promise<void> {
  await client.query('update admin_idempotency_keys set resource_id = $3 where route = $1 and key_hash = $2', [route, claim.keyHash, resourceId]);
}

/** Deletes expired claims (a handful at a time: they expire as fast as keys were created with one). */
export async function sweepExpiredIdempotencyKeys(db: pg.Pool): Promise<void> {
  await db.query('delete from admin_idempotency_keys where expires_at <= now()');
}
