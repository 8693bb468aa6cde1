/**
 * What the control stream tells the control plane about a node, written to its `nodes` row: the
 * facts of its hello (version, protocol, host; the config version it serves while none is on record
 * since its enrollment) and, per heartbeat, the time and live figures the
 * console lists; per config ack, the version the node applied or why it refused one. A version the
 * session has checked is this control plane's is recorded as applied from the hello too, and from
 * heartbeats, so a lost ack does not leave the node shown behind. The first heartbeat moves
 * onboarding from `registered` to `first-heartbeat`; the first applied config moves it to
 * `config-synced`, which is never moved back.
 */
import type pg from 'pg';
import type { NodeFigures, OnboardingStage } from '../nodes/node-repository.js';

export interface HelloFacts {
  version: string;
  protocolVersion: number;
  hostname: string;
  arch: string;
  appliedConfigVersion: number;
}

/** A heartbeat sets every `nodes.figures` key. */
export type HeartbeatFigures = Required<Omit<NodeFigures, 'clockSkewMs'>> & Pick<NodeFigures, 'clockSkewMs'>;

export interface HeartbeatOutcome {
  /** The stage before this heartbeat (null when the node had none). */
  previousStage: OnboardingStage | null;
  stage: OnboardingStage | null;
}

/**
 * Whether the version in parameter `$n`, which a node says it holds, is one of this control
 * plane's whose content is known to be the node's: no newer than the newest version, and not
 * below where a database restored from a backup continued its versions (config-changes.ts): those
 * may name another timeline's content, and only an ack of a push vouches for them.
 */
function vouchedVersion(n: number): string {
  return `$${n}::bigint > 0
    and $${n}::bigint <= (select coalesce(max(version), 0) from config_changes)
    and $${n}::bigint >= (select coalesce(max(version), 0) from config_changes where action = 'versions-continued')`;
}

/**
 * Records a hello; false when the node no longer exists (deleted meanwhile). Nothing applied on
 * record since the enrollment (recordEnrollment clears it): the version the hello says the node
 * serves is taken as applied, as the session takes it (it pushes only what is newer), so a node
 * re-enrolled with its config cache kept is not shown behind by every version. The node reports 0
 * for a config of an earlier enrollment as another node, which records nothing.
 */
export async function recordHello(db: pg.Pool | pg.PoolClient, nodeId: string, facts: HelloFacts): Promise<boolean> {
  const result = await db.query(
    `update nodes
        set version = $2,
            protocol_version = $3,
            hostname = nullif($4, ''),
            arch = nullif($5, ''),
            figures = coalesce(figures, '{}'::jsonb) || jsonb_build_object('appliedConfigVersion', $6::bigint),
            applied_config_version = case when applied_config_version is null and ${vouchedVersion(6)} then $6::bigint else applied_config_version end,
            config_synced_at = case when applied_config_version is null and ${vouchedVersion(6)} then now() else config_synced_at end
      where id = $1 and deleted_at is null`,
    [nodeId, facts.version, facts.protocolVersion, facts.hostname, facts.arch, facts.appliedConfigVersion],
  );
  return result.rowCount === 1;
}

/**
 * Records a heartbeat at the database's clock (one clock for every gateway replica, and the one
 * status is judged by); undefined when the node no longer exists. `confirmedConfigVersion`: a
 * version the session knows the node holds (an ack it took, its checked hello), recorded as applied
 * when the row is behind it — the backstop for an ack or hello whose recording failed while the
 * stream stayed up. Never the heartbeat's own figure, which the node alone vouches for; 0 for none.
 */
export async function recordHeartbeat(
  db: pg.Pool | pg.PoolClient,
  nodeId: string,
  figures: HeartbeatFigures,
  confirmedConfigVersion = 0,
): Promise<HeartbeatOutcome | undefined> {
  const result = await db.query<{ previous_stage: OnboardingStage | null; stage: OnboardingStage | null }>(
    `with before as (
       select id, onboarding_stage,
              $3::bigint > coalesce(applied_config_version, 0) and ${vouchedVersion(3)} as raises_applied
         from nodes where id = $1 and deleted_at is null for update
     )
     update nodes n
        set last_heartbeat_at = now(),
            figures = coalesce(n.figures, '{}'::jsonb) || $2::jsonb,
            applied_config_version = case when before.raises_applied then $3::bigint else n.applied_config_version end,
            config_synced_at = case when before.raises_applied then now() else n.config_synced_at end,
            config_error = case
              when before.raises_applied and (n.config_error->>'version')::bigint <= $3::bigint then null
              else n.config_error
            end,
            onboarding_stage = case
              when before.raises_applied then 'config-synced'
              when n.onboarding_stage is null or n.onboarding_stage = 'registered' then 'first-heartbeat'
              else n.onboarding_stage
            end
       from before
      where n.id = before.id
     returning before.onboarding_stage as previous_stage, n.onboarding_stage as stage`,
    [nodeId, JSON.stringify(figures), confirmedConfigVersion],
  );
  const row = result.rows[0];
  return row === undefined ? undefined : { previousStage: row.previous_stage, stage: row.stage };
}

/**
 * The node applied `version`: the applied version only ever rises (acks of two replicas may cross),
 * the stage becomes `config-synced`, and a refusal on record is cleared. False when the node is gone.
 */
export async function recordConfigApplied(db: pg.Pool | pg.PoolClient, nodeId: string, version: number): Promise<boolean> {
  const result = await db.query(
    `update nodes
        set applied_config_version = greatest(coalesce(applied_config_version, 0), $2::bigint),
            config_synced_at = now(),
            onboarding_stage = 'config-synced',
            config_error = null
      where id = $1 and deleted_at is null`,
    [nodeId, version],
  );
  return result.rowCount === 1;
}

/**
 * The node serves `version`, which the session has checked is this control plane's (the hello of a
 * node whose versions are not those of a database restored from a backup): recorded as its ack would
 * have been, for an ack that was lost (the control plane died before recording it, the stream
 * dropped between apply and ack) — the session pushes nothing the node already serves, so the row
 * would stay behind until the next change. Only ever raises the applied version, never past the
 * newest version here (a node cannot vouch for a version this control plane never had); a refusal
 * of that version or an older one is cleared. False when nothing was recorded.
 */
export async function recordConfigServed(db: pg.Pool | pg.PoolClient, nodeId: string, version: number): Promise<boolean> {
  const result = await db.query(
    `update nodes
        set applied_config_version = $2::bigint,
            config_synced_at = case when applied_config_version = $2::bigint then coalesce(config_synced_at, now()) else now() end,
            onboarding_stage = 'config-synced',
            config_error = case when (config_error->>'version')::bigint <= $2::bigint then null else config_error end
      where id = $1 and deleted_at is null
        and coalesce(applied_config_version, 0) <= $2::bigint
        and ${vouchedVersion(2)}`,
    [nodeId, version],
  );
  return result.rowCount === 1;
}

export interface ConfigRefusal { version: number; code: string; message: string }

/**
 * The node refused `version` (or the control plane could not build it: config-sync.ts) and keeps
 * serving its last good config: recorded for operators.
 */
export async function recordConfigRefused(db: pg.Pool | pg.PoolClient, nodeId: string, refusal: ConfigRefusal): Promise<boolean> {
  const result = await db.query(
    `update nodes
        set config_error = jsonb_build_object('version', $2::bigint, 'code', $3::text, 'message', $4::text,
                                              'at', to_char(now() at time zone 'utc', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
      where id = $1 and deleted_at is null`,
    [nodeId, refusal.version, refusal.code, refusal.message],
  );
  return result.rowCount === 1;
}
