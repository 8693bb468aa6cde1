/**
 * What the admin API shows of a node (DESIGN §12): the wizard's fields, live status derived from
 * the last heartbeat, the figures of that heartbeat, and its config state from its config acks.
 * The zod schema is the response schema, so nothing beyond it (a CA, internals) leaves by accident;
 * `hasCa` says whether a CA is set.
 */
import { z } from 'zod';
import { etagOf } from '../http/if-match.js';
import { SPOOL_FULL_POLICIES, SURFACES } from './node-validation.js';
import type { NodeRow } from './node-repository.js';

export const NODE_STATUSES = ['pending', 'online', 'offline'] as const;
export type NodeStatus = (typeof NODE_STATUSES)[number];

export const configErrorSchema = z.object({
  version: z.number(),
  code: z.string(),
  message: z.string(),
  at: z.string(),
});

export type ConfigErrorView = z.infer<typeof configErrorSchema>;

export const nodeViewSchema = z.object({
  id: z.string(),
  name: z.string(),
  region: z.string().nullable(),
  surfaces: z.array(z.enum(SURFACES)),
  installDir: z.string().nullable(),
  address: z.string(),
  controlPlaneUrl: z.string(),
  hasCa: z.boolean(),
  spoolQuotaGb: z.number(),
  spoolFullPolicy: z.enum(SPOOL_FULL_POLICIES),
  replicas: z.number(),
  status: z.enum(NODE_STATUSES),
  version: z.string().nullable(),
  protocolVersion: z.number().nullable(),
  /** Versions published since the one the node last acknowledged; null for a node never enrolled. */
  configVersionsBehind: z.number().nullable(),
  appliedConfigVersion: z.number().nullable(),
  /** Why the node refused its last push (it keeps serving its last good config); null once one applies. */
  configError: configErrorSchema.nullable(),
  lastHeartbeatAt: z.string().nullable(),
  /**
   * The node's clock minus this control plane's at its last heartbeat, in ms (positive: the node is
   * ahead); null before a heartbeat measured it. The node judges expiries by the control plane's time.
   */
  clockSkewMs: z.number().nullable(),
  /** The figures of the last heartbeat; null before the node sent one (nothing measured yet, not 0). */
  requests5m: z.number().nullable(),
  errorRate5m: z.number().nullable(),
  backfillBacklog: z.number().nullable(),
  spoolBytes: z.number().nullable(),
  onboardingStage: z.enum(['registered', 'first-heartbeat', 'config-synced']).nullable(),
  hostname: z.string().nullable(),
  arch: z.string().nullable(),
  enrolledAt: z.string().nullable(),
  createdAt: z.string(),
});

export type NodeView = z.infer<typeof nodeViewSchema>;

/** `pending` until the first heartbeat; `online` while the last one is younger than offlineAfterMs. */
export function nodeStatus(lastHeartbeatAt: Date | null, offlineAfterMs: number, now: Date): NodeStatus {
  if (lastHeartbeatAt === null) return 'pending';
  return now.getTime() - lastHeartbeatAt.getTime() < offlineAfterMs ? 'online' : 'offline';
}

/** errors / requests, rounded to 4 places; 0 when there were no requests. */
export function errorRate(requests: number, errors: number): number {
  if (requests <= 0) return 0;
  return Math.round((errors / requests) * 10_000) / 10_000;
}

/** The recorded refusal, or null when there is none or it is not in the shape the gateway writes. */
function configErrorOf(value: unknown): ConfigErrorView | null {
  const parsed = configErrorSchema.safeParse(value);
  return parsed.success ? parsed.data : null;
}

/** max(0, latest − applied); null until the node has enrolled (there is nothing to be behind on). */
export function configVersionsBehind(row: Pick<NodeRow, 'enrolledAt' | 'appliedConfigVersion' | 'latestConfigVersion'>): number | null {
  if (row.enrolledAt === null && row.appliedConfigVersion === null) return null;
  return Math.max(0, row.latestConfigVersion - (row.appliedConfigVersion ?? 0));
}

/** A figure as a finite non-negative number (heartbeats are the node's word; never trust the shape). */
function figure(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : 0;
}

/** A skew as the node reported it: any finite number (negative too), null otherwise. */
function skewOf(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? Math.round(value) : null;
}

/** The live figures of the last heartbeat; all null before the first (a hello alone measures none). */
function heartbeatFigures(row: Pick<NodeRow, 'lastHeartbeatAt' | 'figures'>): Pick<NodeView, 'requests5m' | 'errorRate5m' | 'backfillBacklog' | 'spoolBytes'> {
  if (row.lastHeartbeatAt === null) return { requests5m: null, errorRate5m: null, backfillBacklog: null, spoolBytes: null };
  const requests5m = figure(row.figures.requests5m);
  return {
    requests5m,
    errorRate5m: errorRate(requests5m, figure(row.figures.errors5m)),
    backfillBacklog: figure(row.figures.backfillBacklog),
    spoolBytes: figure(row.figures.spoolBytes),
  };
}

/** Status is judged against the database's clock read with the row (`databaseNow`), the clock that stamps heartbeats. */
export function toNodeView(row: NodeRow, opts: { offlineAfterMs: number }): NodeView {
  return {
    id: row.id,
    name: row.name,
    region: row.region,
    surfaces: row.surfaces,
    installDir: row.installDir,
    address: row.address,
    controlPlaneUrl: row.controlPlaneUrl,
    hasCa: row.caPem !== null,
    spoolQuotaGb: row.spoolQuotaGb,
    spoolFullPolicy: row.spoolFullPolicy,
    replicas: row.replicas,
    status: nodeStatus(row.lastHeartbeatAt, opts.offlineAfterMs, row.databaseNow),
    version: row.version,
    protocolVersion: row.protocolVersion,
    configVersionsBehind: configVersionsBehind(row),
    appliedConfigVersion: row.appliedConfigVersion,
    configError: configErrorOf(row.configError),
    lastHeartbeatAt: row.lastHeartbeatAt?.toISOString() ?? null,
    clockSkewMs: skewOf(row.figures.clockSkewMs),
    ...heartbeatFigures(row),
    onboardingStage: row.onboardingStage,
    hostname: row.hostname,
    arch: row.arch,
    enrolledAt: row.enrolledAt?.toISOString() ?? null,
    createdAt: row.createdAt.toISOString(),
  };
}

/**
 * The node's ETag (http/if-match.ts): a hash of what an operator sets — the wizard's fields, the
 * network (address, control-plane URL, CA) and the settings — not of what the node reports
 * (heartbeats, status, config acks), which change by the second and are no edit to lose.
 */
export function nodeEtag(row: NodeRow): string {
  return etagOf({
    node: {
      id: row.id,
      name: row.name,
      region: row.region,
      surfaces: row.surfaces,
      installDir: row.installDir,
      address: row.address,
      controlPlaneUrl: row.controlPlaneUrl,
      caPem: row.caPem,
      spoolQuotaGb: row.spoolQuotaGb,
      spoolFullPolicy: row.spoolFullPolicy,
      replicas: row.replicas,
    },
  });
}
