/**
 * One-time install tokens (install / reenroll / upgrade). The token text is shown once and only its
 * SHA-256 is stored. Issuing a token invalidates the node's previous unused token of the same kind;
 * redeeming marks it used under a row lock, so of two concurrent redemptions exactly one wins.
 *
 * A redemption may carry a redemption key (random, made by the node per enrollment attempt); only
 * its SHA-256 is stored. The same token presented again with the same key is a retry of an answer
 * that was lost: it is accepted while ENROLL_RETRY_WINDOW_MS has not passed since the first
 * redemption and the credential that redemption issued was never used (see enrollment.ts).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type pg from 'pg';

export const INSTALL_TOKEN_PREFIX = 'zn_it_';
export const INSTALL_TOKEN_KINDS = ['install', 'reenroll', 'upgrade'] as const;
export type InstallTokenKind = (typeof INSTALL_TOKEN_KINDS)[number];

const TOKEN_BYTES = 32;

export function generateInstallToken(): string {
  return `${INSTALL_TOKEN_PREFIX}${randomBytes(TOKEN_BYTES).toString('base64url')}`;
}

export function hashInstallToken(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

/** How long after its first redemption a token may be redeemed again with the same redemption key. */
export const ENROLL_RETRY_WINDOW_MS = 15 * 60_000;

/** A redemption key: 32 random bytes, base64url without padding. */
export const REDEMPTION_KEY_PATTERN = /^[A-Za-z0-9_-]{43}$/;

export function hashRedemptionKey(key: string): Buffer {
  return createHash('sha256').update(key, 'utf8').digest();
}

export interface IssuedInstallToken {
  tokenId: string;
  /** The only time the text exists outside the operator's hands. */
  token: string;
  kind: InstallTokenKind;
  expiresAt: Date;
}

/**
 * Issues a token for a live node, invalidating its previous unused token of this kind. Call inside a
 * transaction: the node row is locked so two reissues cannot both leave a token open.
 * Returns undefined when the node does not exist or is deleted.
 */
export async function issueInstallToken(
  client: pg.PoolClient,
  nodeId: string,
  kind: InstallTokenKind,
  ttlMs: number,
  now: Date = new Date(),
): Promise<IssuedInstallToken | undefined> {
  const node = await client.query('select 1 from nodes where id = $1 and deleted_at is null for update', [nodeId]);
  if (node.rowCount === 0) return undefined;
  await client.query(
    `update install_tokens set invalidated_at = $3
      where node_id = $1 and kind = $2 and used_at is null and invalidated_at is null`,
    [nodeId, kind, now],
  );
  const token = generateInstallToken();
  const expiresAt = new Date(now.getTime() + ttlMs);
  const { rows } = await client.query<{ id: string }>(
    `insert into install_tokens (node_id, kind, token_hash, created_at, expires_at)
     values ($1, $2, $3, $4, $5) returning id`,
    [nodeId, kind, hashInstallToken(token), now, expiresAt],
  );
  return { tokenId: rows[0]!.id, token, kind, expiresAt };
}

/** Why a token cannot be redeemed; each maps to its own error code. */
export type RedeemFailure =
  | { reason: 'unknown' }
  | { reason: 'node-deleted'; nodeId: string }
  | { reason: 'wrong-kind'; kind: InstallTokenKind }
  | { reason: 'used'; usedAt: Date }
  /** Replaced by a newer token of the same kind before it was used. */
  | { reason: 'superseded'; invalidatedAt: Date }
  | { reason: 'expired'; expiresAt: Date };

export type RedeemResult =
  /** `retry`: the token was redeemed before with this redemption key and may be answered again. */
  | { ok: true; tokenId: string; nodeId: string; kind: InstallTokenKind; retry: boolean }
  | ({ ok: false } & RedeemFailure);

interface TokenRow {
  id: string;
  node_id: string;
  kind: InstallTokenKind;
  expires_at: Date;
  used_at: Date | null;
  invalidated_at: Date | null;
  node_deleted_at: Date | null;
  redemption_key_hash: Buffer | null;
  /** Whether the credential the last redemption issued is still live and was never used. */
  redemption_credential_unused: boolean;
}

export interface RedeemOptions {
  /** The node's redemption key for this attempt; absent for older nodes (no retry possible). */
  redemptionKey?: string | undefined;
  /** Defaults to ENROLL_RETRY_WINDOW_MS. */
  retryWindowMs?: number;
}

/**
 * Whether a used token may be answered again: the same redemption key (hashes compared in constant
 * time), within the window from the first redemption, and the credential that redemption issued is
 * live and was never presented or acknowledged (the node never connected with it).
 */
function isRetry(row: TokenRow, usedAt: Date, opts: RedeemOptions, now: Date): boolean {
  if (opts.redemptionKey === undefined || row.redemption_key_hash === null) return false;
  const matches = timingSafeEqual(row.redemption_key_hash, hashRedemptionKey(opts.redemptionKey));
  const windowMs = opts.retryWindowMs ?? ENROLL_RETRY_WINDOW_MS;
  return matches && now.getTime() < usedAt.getTime() + windowMs && row.redemption_credential_unused;
}

/**
 * Redeems `token` for one of the `accepted` kinds and marks it used. Call inside a transaction (the
 * token row stays locked until it ends; a concurrent redemption waits, then sees it used). Checks
 * run in the order that tells the operator the most useful thing: a token of the wrong kind is
 * reported as such even when it is also expired, because a fresh one of that kind would fail again.
 */
export async function redeemInstallToken(
  client: pg.PoolClient,
  token: string,
  accepted: readonly InstallTokenKind[],
  now: Date = new Date(),
  opts: RedeemOptions = {},
): Promise<RedeemResult> {
  const tokenHash = hashInstallToken(token);
  // Lock order is node row, then token rows — as deleting a node and issuing a command take them.
  // Locking the token first and the node (by recordEnrollment's update) second deadlocked against
  // a concurrent delete. A token never changes node, so the unlocked lookup names the right one.
  const owner = await client.query<{ node_id: string }>('select node_id from install_tokens where token_hash = $1', [tokenHash]);
  if (!owner.rows[0]) return { ok: false, reason: 'unknown' };
  // NO KEY UPDATE is the lock recordEnrollment's update takes anyway: nothing new is blocked.
  await client.query('select 1 from nodes where id = $1 for no key update', [owner.rows[0].node_id]);
  const { rows } = await client.query<TokenRow>(
    `select t.id, t.node_id, t.kind, t.expires_at, t.used_at, t.invalidated_at, n.deleted_at as node_deleted_at,
            t.redemption_key_hash,
            coalesce(c.revoked_at is null and c.acknowledged_at is null, false) as redemption_credential_unused
       from install_tokens t join nodes n on n.id = t.node_id
       left join node_credentials c on c.id = t.redemption_credential_id
      where t.token_hash = $1
        for update of t`,
    [tokenHash],
  );
  const row = rows[0];
  if (!row) return { ok: false, reason: 'unknown' };
  if (row.node_deleted_at !== null) return { ok: false, reason: 'node-deleted', nodeId: row.node_id };
  if (!accepted.includes(row.kind)) return { ok: false, reason: 'wrong-kind', kind: row.kind };
  if (row.used_at !== null) {
    if (isRetry(row, row.used_at, opts, now)) return { ok: true, tokenId: row.id, nodeId: row.node_id, kind: row.kind, retry: true };
    return { ok: false, reason: 'used', usedAt: row.used_at };
  }
  if (row.invalidated_at !== null) return { ok: false, reason: 'superseded', invalidatedAt: row.invalidated_at };
  if (row.expires_at.getTime() <= now.getTime()) return { ok: false, reason: 'expired', expiresAt: row.expires_at };
  await client.query('update install_tokens set used_at = $2, redemption_key_hash = $3 where id = $1', [
    row.id, now, opts.redemptionKey === undefined ? null : hashRedemptionKey(opts.redemptionKey),
  ]);
  return { ok: true, tokenId: row.id, nodeId: row.node_id, kind: row.kind, retry: false };
}

/**
 * Records the credential a redemption (or its retry) issued, so a retry can tell whether the node
 * ever used it. Only for redemptions that carried a redemption key.
 */
export async function recordRedemptionCredential(client: pg.PoolClient, tokenId: string, credentialId: string): Promise<void> {
  await client.query('update install_tokens set redemption_credential_id = $2 where id = $1 and redemption_key_hash is not null', [tokenId, credentialId]);
}

/** Invalidates every open token of the node (it is being deleted). */
export async function invalidateNodeTokens(client: pg.PoolClient, nodeId: string, now: Date = new Date()): Promise<void> {
  await client.query(
    'update install_tokens set invalidated_at = $2 where node_id = $1 and used_at is null and invalidated_at is null',
    [nodeId, now],
  );
}
