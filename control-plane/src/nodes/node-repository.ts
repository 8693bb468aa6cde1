/** SQL for the `nodes` table. Reads see live (not deleted) nodes unless they say otherwise. */
import type { NodeCreateInput, NodeNetworkPatch, SpoolFullPolicy, Surface } from './node-validation.js';
import type { Queryable } from './with-transaction.js';
import { zenovaError } from '../errors.js';
import { UUID_PATTERN } from '../billing/ledger.js';

export type OnboardingStage = 'registered' | 'first-heartbeat' | 'config-synced';

/** Live figures from the node's last heartbeat (written by the gateway). */
export interface NodeFigures {
  requests5m?: number;
  errors5m?: number;
  spoolBytes?: number;
  backfillBacklog?: number;
  appliedConfigVersion?: number;
  /** The node's clock minus this control plane's at the last heartbeat (its sentAt against our clock; positive: node ahead). */
  clockSkewMs?: number;
}

export interface NodeRow {
  id: string;
  name: string;
  region: string | null;
  surfaces: Surface[];
  installDir: string | null;
  address: string;
  controlPlaneUrl: string;
  caPem: string | null;
  spoolQuotaGb: number;
  spoolFullPolicy: SpoolFullPolicy;
  replicas: number;
  createdAt: Date;
  deletedAt: Date | null;
  enrolledAt: Date | null;
  hostname: string | null;
  arch: string | null;
  version: string | null;
  protocolVersion: number | null;
  lastHeartbeatAt: Date | null;
  onboardingStage: OnboardingStage | null;
  figures: NodeFigures;
  /** The newest config version this node acknowledged applying; null before its first. */
  appliedConfigVersion: number | null;
  configSyncedAt: Date | null;
  /** The last refused push, as the gateway recorded it: {version, code, message, at}; cleared by the next applied one. */
  configError: unknown;
  /** The installation's newest config version when the row was read (read with it: one query per view). */
  latestConfigVersion: number;
  /**
   * The database's now() when the row was read: status is judged against it, the clock that stamped
   * last_heartbeat_at, never this process's (which may be off from the database's).
   */
  databaseNow: Date;
}

/** Facts a node reports when it enrolls. */
export interface EnrollmentFacts {
  hostname: string;
  arch: string;
  version: string;
  protocolVersion: number;
}

const COLUMNS = `
  id, name, region, surfaces, install_dir as "installDir", address, control_plane_url as "controlPlaneUrl",
  ca_pem as "caPem", spool_quota_gb as "spoolQuotaGb", spool_full_policy as "spoolFullPolicy", replicas,
  created_at as "createdAt", deleted_at as "deletedAt", enrolled_at as "enrolledAt", hostname, arch, version,
  protocol_version as "protocolVersion", last_heartbeat_at as "lastHeartbeatAt",
  onboarding_stage as "onboardingStage", figures,
  applied_config_version::float8 as "appliedConfigVersion", config_synced_at as "configSyncedAt", config_error as "configError",
  coalesce((select max(version) from config_changes), 0)::float8 as "latestConfigVersion",
  now() as "databaseNow"`;

const UNIQUE_VIOLATION = '23505';

function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === UNIQUE_VIOLATION;
}

/** Inserts a node; a live node of the same name is ZN_ERR_CP_NODE_NAME_TAKEN. */
export async function insertNode(db: Queryable, input: NodeCreateInput, now: Date = new Date()): Promise<NodeRow> {
  try {
    const { rows } = await db.query<NodeRow>(
      `insert into nodes (name, region, surfaces, install_dir, address, control_plane_url, ca_pem,
                          spool_quota_gb, spool_full_policy, replicas, created_at)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
       returning ${COLUMNS}`,
      [
        input.name, input.region ?? null, input.surfaces, input.installDir ?? null, input.address,
        input.controlPlaneUrl, input.caPem ?? null, input.spoolQuotaGb, input.spoolFullPolicy, input.replicas, now,
      ],
    );
    return rows[0]!;
  } catch (err) {
    if (isUniqueViolation(err)) {
      throw zenovaError('ZN_ERR_CP_NODE_NAME_TAKEN', `name: a node named '${input.name}' already exists; node names are unique and cannot be changed`);
    }
    throw err;
  }
}

export async function findLiveNodeByName(db: Queryable, name: string, opts: { forUpdate?: boolean } = {}): Promise<NodeRow | undefined> {
  const { rows } = await db.query<NodeRow>(
    `select ${COLUMNS} from nodes where name = $1 and deleted_at is null${opts.forUpdate ? ' for update' : ''}`,
    [name],
  );
  return rows[0];
}

/** Any node, deleted or not. */
export async function findNodeById(db: Queryable, id: string): Promise<NodeRow | undefined> {
  const { rows } = await db.query<NodeRow>(`select ${COLUMNS} from nodes where id = $1`, [id]);
  return rows[0];
}

/**
 * The node a query parameter names (`?node=` of the leases and records lists): the live node of
 * that name, else the node, deleted ones too, with that id. A name is at most 31 characters and an
 * id 36, so one text never means both.
 */
export async function findNodeByNameOrId(db: Queryable, nameOrId: string): Promise<{ id: string; name: string } | undefined> {
  const { rows } = await db.query<{ id: string; name: string }>(
    `select id, name from nodes where deleted_at is null and name = $1
     union all select id, name from nodes where id = $2::uuid limit 1`,
    [nameOrId, UUID_PATTERN.test(nameOrId) ? nameOrId.toLowerCase() : null],
  );
  return rows[0];
}

export async function listLiveNodes(db: Queryable): Promise<NodeRow[]> {
  const { rows } = await db.query<NodeRow>(`select ${COLUMNS} from nodes where deleted_at is null order by name`);
  return rows;
}

export async function markNodeDeleted(db: Queryable, id: string, now: Date = new Date()): Promise<void> {
  await db.query('update nodes set deleted_at = $2 where id = $1 and deleted_at is null', [id, now]);
}

/** The node is deleted: what it sent is not taken (a gateway session ends with NODE_DELETED). */
export class NodeDeletedError extends Error {
  constructor(readonly nodeId: string) {
    super(`node ${nodeId} is deleted`);
    this.name = 'NodeDeletedError';
  }
}

/**
 * Takes the node's row FOR SHARE for the caller's transaction, as a lease top-up does: a deletion
 * (which takes the row for update) waits for the transaction, or the transaction for the deletion
 * and then throws NodeDeletedError. An id without a row (not a UUID: none) passes: the caller
 * authenticated the node.
 */
export async function shareUndeletedNode(db: Queryable, id: string): Promise<void> {
  if (!UUID_PATTERN.test(id)) return;
  const { rows } = await db.query<{ deleted: boolean }>('select deleted_at is not null as deleted from nodes where id = $1 for share', [id]);
  if (rows[0]?.deleted === true) throw new NodeDeletedError(id);
}

/** Applies the given network fields (undefined = keep; caPem null = remove). */
export async function updateNodeNetwork(db: Queryable, id: string, patch: NodeNetworkPatch): Promise<NodeRow | undefined> {
  const { rows } = await db.query<NodeRow>(
    `update nodes set
        address = coalesce($2, address),
        control_plane_url = coalesce($3, control_plane_url),
        ca_pem = case when $4::boolean then $5 else ca_pem end
      where id = $1 and deleted_at is null
      returning ${COLUMNS}`,
    [id, patch.address ?? null, patch.controlPlaneUrl ?? null, patch.caPem !== undefined, patch.caPem ?? null],
  );
  return rows[0];
}

/**
 * Records a successful enrollment: the host's facts, onboarding starts over at `registered`, and
 * the config state starts over too (applied version, when synced, last refusal): they were another
 * host's, or another state dir's, and kept they showed a fresh host that serves nothing as current.
 * The node's hello says what it holds (recordHello), and its acks move it on from there.
 */
export async function recordEnrollment(db: Queryable, id: string, facts: EnrollmentFacts, now: Date = new Date()): Promise<NodeRow> {
  const { rows } = await db.query<NodeRow>(
    `update nodes set hostname = $2, arch = $3, version = $4, protocol_version = $5,
                      enrolled_at = $6, onboarding_stage = 'registered',
                      applied_config_version = null, config_synced_at = null, config_error = null
      where id = $1
      returning ${COLUMNS}`,
    [id, facts.hostname, facts.arch, facts.version, facts.protocolVersion, now],
  );
  return rows[0]!;
}
