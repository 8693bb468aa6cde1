/**
 * What the control stream tells the control plane about a node, written to its `nodes` row: the
 * facts of its hello (version, protocol, host) and, per heartbeat, the time and live figures the
 * console lists. The first heartbeat moves onboarding from `registered` to `first-heartbeat`; a
 * later stage (`config-synced`) is never moved back.
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
export type HeartbeatFigures = Required<NodeFigures>;

export interface HeartbeatOutcome {
  /** The stage before this heartbeat (null when the node had none). */
  previousStage: OnboardingStage | null;
  stage: OnboardingStage | null;
}

/** Records a hello; false when the node no longer exists (deleted meanwhile). */
export async function recordHello(db: pg.Pool | pg.PoolClient, nodeId: string, facts: HelloFacts): Promise<boolean> {
  const result = await db.query(
    `update nodes
        set version = $2,
            protocol_version = $3,
            hostname = nullif($4, ''),
            arch = nullif($5, ''),
            figures = coalesce(figures, '{}'::jsonb) || jsonb_build_object('appliedConfigVersion', $6::bigint)
      where id = $1 and deleted_at is null`,
    [nodeId, facts.version, facts.protocolVersion, facts.hostname, facts.arch, facts.appliedConfigVersion],
  );
  return result.rowCount === 1;
}

/**
 * Records a heartbeat at the database's clock (one clock for every gateway replica, and the one
 * status is judged by); undefined when the node no longer exists.
 */
export async function recordHeartbeat(db: pg.Pool | pg.PoolClient, nodeId: string, figures: HeartbeatFigures): Promise<HeartbeatOutcome | undefined> {
  const result = await db.query<{ previous_stage: OnboardingStage | null; stage: OnboardingStage | null }>(
    `with before as (
       select id, onboarding_stage from nodes where id = $1 and deleted_at is null for update
     )
     update nodes n
        set last_heartbeat_at = now(),
            figures = coalesce(n.figures, '{}'::jsonb) || $2::jsonb,
            onboarding_stage = case
              when n.onboarding_stage is null or n.onboarding_stage = 'registered' then 'first-heartbeat'
              else n.onboarding_stage
            end
       from before
      where n.id = before.id
     returning before.onboarding_stage as previous_stage, n.onboarding_stage as stage`,
    [nodeId, JSON.stringify(figures)],
  );
  const row = result.rows[0];
  return row === undefined ? undefined : { previousStage: row.previous_stage, stage: row.stage };
}
