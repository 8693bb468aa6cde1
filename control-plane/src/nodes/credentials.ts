/**
 * Per-node credentials for the control stream. A credential is the opaque string
 * `<credentialId uuid>.<secret 43 chars base64url>`; only SHA-256(secret) is stored and hashes are
 * compared in constant time.
 *
 * Rotation issues a successor and leaves the presented credential as it is: it keeps working until
 * the node acknowledges the successor (an ack on the stream, or presenting the successor when it
 * connects) and for one handover window (valid_until) after that, never beyond its own expires_at.
 * A rotation reply lost on the wire therefore never locks a node out, however long the node then
 * stays away, as long as its credential has not expired. A node that keeps losing replies gains
 * nothing either: an unacknowledged successor never extends anything, each new rotation revokes
 * the previous unacknowledged one, and the old credential still ends at its expires_at.
 *
 * The same rule (credentialLapse) ends a live control session on the credential it authenticated
 * with: a session is never a way to keep using a credential a reconnect would be refused.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type pg from 'pg';
import { notifyNodeEvent } from './node-events.js';
import { withTransaction } from './with-transaction.js';

export interface CredentialTimings { validityMs: number; rotateAfterMs: number; handoverMs: number }

export type CredentialFailureCode =
  | 'CREDENTIAL_MISSING'
  | 'CREDENTIAL_INVALID'
  | 'CREDENTIAL_EXPIRED'
  | 'CREDENTIAL_REVOKED'
  | 'CREDENTIAL_SUPERSEDED'
  | 'NODE_DELETED';

/** When a credential stops being accepted: its expiry, or the end of its handover window once set. */
export interface CredentialValidity { expiresAt: Date; validUntil: Date | null }

export type CredentialCheck =
  | {
    ok: true; credentialId: string; nodeId: string; nodeName: string; issuedAt: Date; isNewest: boolean; acknowledged: boolean;
    validity: CredentialValidity;
  }
  | { ok: false; code: CredentialFailureCode; message: string };

export interface IssuedCredential { credentialId: string; credential: string; expiresAt: Date }

const SECRET_BYTES = 32;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const CREDENTIAL_FORMAT = /^([0-9a-fA-F-]{36})\.([A-Za-z0-9_-]{43})$/;

const REENROLL_ADVICE =
  'Re-enroll the node: on the control-plane host run `zenova gateway-node reenroll-command NAME`, then run the printed ' +
  '`zenova install node … --reenroll` command on the node host (a node run without the installer: ' +
  '`zenova-node enroll --reenroll --token-file FILE …` with its token).';

const MESSAGES: Record<CredentialFailureCode, string> = {
  CREDENTIAL_MISSING: 'The node sent no node id or credential. Enroll the node first (zenova install node or zenova-node enroll).',
  CREDENTIAL_INVALID: `The node credential is not valid for this node id (unknown, mistyped or from another control plane). ${REENROLL_ADVICE}`,
  CREDENTIAL_EXPIRED: `The node credential has expired (the node was offline longer than its validity, or never acknowledged the credential it was rotated to). ${REENROLL_ADVICE}`,
  CREDENTIAL_REVOKED: `The node credential was revoked (the node was re-enrolled or its credentials reset). ${REENROLL_ADVICE}`,
  CREDENTIAL_SUPERSEDED:
    'The node credential was replaced by a rotation and its handover window has ended; the node should use the newer ' +
    `credential it saved. If it has none, ${REENROLL_ADVICE.charAt(0).toLowerCase()}${REENROLL_ADVICE.slice(1)}`,
  NODE_DELETED:
    'The node was deleted on the control plane and cannot come back: its records not yet sent can no longer be delivered. ' +
    'To serve from that host again, create a node (zenova gateway-node create --name NAME …), then on the control-plane host run ' +
    '`zenova gateway-node reenroll-command NAME` and run the printed `zenova install node … --reenroll` command on the node host ' +
    '(without the installer: `zenova-node enroll --reenroll --token-file FILE …`): it moves the ' +
    "old node's spool and config aside (kept in the state dir's retired/ directory; never delete the node's directory).",
};

function failure(code: CredentialFailureCode): CredentialCheck {
  return { ok: false, code, message: MESSAGES[code] };
}

/**
 * Why a credential with `validity` is no longer accepted at `now`, or undefined while it is: the one
 * rule for connecting and for staying connected.
 */
export function credentialLapse(
  validity: CredentialValidity,
  now: Date,
): { code: 'CREDENTIAL_SUPERSEDED' | 'CREDENTIAL_EXPIRED'; message: string } | undefined {
  if (validity.validUntil !== null && validity.validUntil.getTime() <= now.getTime()) {
    return { code: 'CREDENTIAL_SUPERSEDED', message: MESSAGES.CREDENTIAL_SUPERSEDED };
  }
  if (validity.expiresAt.getTime() <= now.getTime()) return { code: 'CREDENTIAL_EXPIRED', message: MESSAGES.CREDENTIAL_EXPIRED };
  return undefined;
}

const sha256 = (text: string): Buffer => createHash('sha256').update(text, 'utf8').digest();

export function parseCredential(presented: string): { credentialId: string; secret: string } | undefined {
  const match = CREDENTIAL_FORMAT.exec(presented);
  if (!match?.[1] || !match[2] || !UUID.test(match[1])) return undefined;
  return { credentialId: match[1].toLowerCase(), secret: match[2] };
}

export async function issueCredential(
  db: pg.Pool | pg.PoolClient,
  nodeId: string,
  t: CredentialTimings,
  now: Date = new Date(),
): Promise<IssuedCredential> {
  const secret = randomBytes(SECRET_BYTES).toString('base64url');
  const expiresAt = new Date(now.getTime() + t.validityMs);
  const { rows } = await db.query<{ id: string }>(
    `insert into node_credentials (node_id, secret_hash, issued_at, expires_at)
     values ($1, $2, $3, $4) returning id`,
    [nodeId, sha256(secret), now, expiresAt],
  );
  const credentialId = rows[0]!.id;
  return { credentialId, credential: `${credentialId}.${secret}`, expiresAt };
}

interface CredentialRow {
  id: string;
  node_id: string;
  secret_hash: Buffer;
  issued_at: Date;
  expires_at: Date;
  valid_until: Date | null;
  revoked_at: Date | null;
  acknowledged_at: Date | null;
  node_name: string;
  node_deleted_at: Date | null;
  newer_count: string;
}

export async function verifyCredential(
  db: pg.Pool,
  nodeId: string | undefined,
  presented: string | undefined,
  now: Date = new Date(),
): Promise<CredentialCheck> {
  if (!nodeId || !presented) return failure('CREDENTIAL_MISSING');
  const parsed = parseCredential(presented);
  if (!parsed || !UUID.test(nodeId)) return failure('CREDENTIAL_INVALID');
  const { rows } = await db.query<CredentialRow>(
    `select c.id, c.node_id, c.secret_hash, c.issued_at, c.expires_at, c.valid_until, c.revoked_at, c.acknowledged_at,
            n.name as node_name, n.deleted_at as node_deleted_at,
            (select count(*) from node_credentials o
              where o.node_id = c.node_id and o.revoked_at is null and o.issued_at > c.issued_at) as newer_count
       from node_credentials c join nodes n on n.id = c.node_id
      where c.id = $1`,
    [parsed.credentialId],
  );
  const row = rows[0];
  // The secret is checked before anything about the node is revealed.
  if (!row || !timingSafeEqual(row.secret_hash, sha256(parsed.secret)) || row.node_id !== nodeId.toLowerCase()) {
    return failure('CREDENTIAL_INVALID');
  }
  if (row.node_deleted_at !== null) return failure('NODE_DELETED');
  if (row.revoked_at !== null) return failure('CREDENTIAL_REVOKED');
  const validity: CredentialValidity = { expiresAt: row.expires_at, validUntil: row.valid_until };
  const lapse = credentialLapse(validity, now);
  if (lapse !== undefined) return { ok: false, ...lapse };
  return {
    ok: true,
    credentialId: row.id,
    nodeId: row.node_id,
    nodeName: row.node_name,
    issuedAt: row.issued_at,
    isNewest: Number(row.newer_count) === 0,
    acknowledged: row.acknowledged_at !== null,
    validity,
  };
}

/**
 * Issues a successor and revokes unacknowledged earlier successors (their replies were lost: the
 * node is back with `from`). The presented credential is not shortened here, because the node may
 * never receive the reply; acknowledgeCredential starts its handover window. `previousValidUntil`
 * is the earliest it can stop being accepted (were the successor acknowledged at once).
 */
export async function rotateCredential(
  db: pg.Pool,
  nodeId: string,
  fromCredentialId: string,
  t: CredentialTimings,
  now: Date = new Date(),
): Promise<IssuedCredential & { previousValidUntil: Date }> {
  return withTransaction(db, async (client) => {
    // Serialises rotations and acknowledgements of one node (two replicas, or a reconnect racing a periodic rotation).
    const node = await client.query('select 1 from nodes where id = $1 and deleted_at is null for update', [nodeId]);
    if (node.rowCount === 0) throw new Error(`cannot rotate credentials of node ${nodeId}: it does not exist or was deleted`);
    const from = await client.query<{ issued_at: Date; expires_at: Date; valid_until: Date | null }>(
      `select issued_at, expires_at, valid_until from node_credentials
        where id = $1 and node_id = $2 and revoked_at is null`,
      [fromCredentialId, nodeId],
    );
    const previous = from.rows[0];
    if (!previous) throw new Error(`cannot rotate from credential ${fromCredentialId}: not a live credential of node ${nodeId}`);
    await client.query(
      `update node_credentials set revoked_at = $3
        where node_id = $1 and issued_at > $2 and acknowledged_at is null and revoked_at is null`,
      [nodeId, previous.issued_at, now],
    );
    const previousValidUntil = new Date(Math.min(
      previous.valid_until?.getTime() ?? Infinity, now.getTime() + t.handoverMs, previous.expires_at.getTime(),
    ));
    const issued = await issueCredential(client, nodeId, t, now);
    return { ...issued, previousValidUntil };
  });
}

/**
 * The node has the credential: it said so on the stream, or it authenticated with it. The first
 * ack is recorded; every ack bounds the node's older live credentials to one handover window from
 * now (never later than they already end or expire), since the node no longer needs them.
 * Returns the acknowledged credential's validity, or undefined when nothing was acknowledged.
 */
export async function acknowledgeCredential(
  db: pg.Pool,
  nodeId: string,
  credentialId: string,
  t: Pick<CredentialTimings, 'handoverMs'>,
  now: Date = new Date(),
): Promise<CredentialValidity | undefined> {
  if (!UUID.test(credentialId) || !UUID.test(nodeId)) return undefined;
  return withTransaction(db, async (client) => {
    // Same lock as rotateCredential: an ack and a rotation that would revoke the acked credential do not interleave.
    const node = await client.query('select 1 from nodes where id = $1 and deleted_at is null for update', [nodeId]);
    if (node.rowCount === 0) return undefined;
    const acked = await client.query<{ issued_at: Date; expires_at: Date; valid_until: Date | null }>(
      `update node_credentials set acknowledged_at = coalesce(acknowledged_at, $3)
        where id = $1 and node_id = $2 and revoked_at is null returning issued_at, expires_at, valid_until`,
      [credentialId, nodeId, now],
    );
    const row = acked.rows[0];
    if (row === undefined) return undefined; // revoked or not this node's: it acknowledges nothing
    // least() skips a null valid_until; the window never extends what is already shorter.
    await client.query(
      `update node_credentials set valid_until = least(valid_until, $3::timestamptz, expires_at)
        where node_id = $1 and issued_at < $2 and revoked_at is null`,
      [nodeId, row.issued_at, new Date(now.getTime() + t.handoverMs)],
    );
    return { expiresAt: row.expires_at, validUntil: row.valid_until };
  });
}

/**
 * Revokes every live credential of the node and tells all replicas (credentials-revoked NOTIFY),
 * in the caller's transaction. `notify: false` when the caller sends its own event (node-deleted).
 */
export async function revokeNodeCredentials(
  db: pg.PoolClient,
  nodeId: string,
  opts: { notify?: boolean; now?: Date } = {},
): Promise<void> {
  const result = await db.query(
    'update node_credentials set revoked_at = $2 where node_id = $1 and revoked_at is null',
    [nodeId, opts.now ?? new Date()],
  );
  if ((opts.notify ?? true) && (result.rowCount ?? 0) > 0) {
    await notifyNodeEvent(db, { type: 'credentials-revoked', nodeId });
  }
}
