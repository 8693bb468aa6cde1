/**
 * The shapes of the nodes admin API's answers (DESIGN §12, docs/api.md), checked before anything
 * is printed. Loose objects: fields added by a newer control plane pass through to --json.
 */
import { z } from 'zod';

const count = z.number().finite().nonnegative();

/** The node's last refusal of a pushed config version (or the control plane's failure to build it). */
export const configErrorSchema = z.looseObject({
  version: z.number(),
  code: z.string(),
  message: z.string(),
  at: z.string(),
});
export type ConfigError = z.infer<typeof configErrorSchema>;

export const nodeViewSchema = z.looseObject({
  id: z.string(),
  name: z.string(),
  region: z.string().nullish(),
  surfaces: z.array(z.string()),
  installDir: z.string().nullish(),
  address: z.string(),
  controlPlaneUrl: z.string(),
  hasCa: z.boolean(),
  spoolQuotaGb: count,
  spoolFullPolicy: z.string(),
  replicas: count,
  status: z.string(),
  version: z.string().nullish(),
  protocolVersion: z.number().nullish(),
  configVersionsBehind: count.nullish(),
  appliedConfigVersion: count.nullish(),
  configError: configErrorSchema.nullish(),
  lastHeartbeatAt: z.string().nullish(),
  requests5m: count.nullish(),
  errorRate5m: count.nullish(),
  backfillBacklog: count.nullish(),
  spoolBytes: count.nullish(),
  clockSkewMs: z.number().finite().nullish(),
  onboardingStage: z.string().nullish(),
  hostname: z.string().nullish(),
  arch: z.string().nullish(),
  enrolledAt: z.string().nullish(),
  createdAt: z.string(),
});
export type NodeView = z.infer<typeof nodeViewSchema>;

export const nodeListSchema = z.looseObject({ nodes: z.array(nodeViewSchema) });

export const commandKinds = ['install', 'reenroll', 'upgrade'] as const;
export type CommandKind = (typeof commandKinds)[number];

/** A one-time command: `POST /api/v1/nodes/:name/<kind>-command`, and `install` in the create answer. */
export const oneTimeCommandSchema = z.looseObject({
  command: z.string().min(1),
  /** The same installer run with --check-only and no token: the pre-check (absent from control planes before it). */
  checkCommand: z.string().min(1).optional(),
  token: z.string().min(1),
  expiresAt: z.string(),
  kind: z.enum(commandKinds).optional(),
  /** The CA the command's --ca-file refers to, when the node has one. */
  caPem: z.string().nullish(),
});
export type OneTimeCommand = z.infer<typeof oneTimeCommandSchema>;

export const createdNodeSchema = z.looseObject({
  node: nodeViewSchema,
  install: oneTimeCommandSchema,
  caPem: z.string().nullish(),
});

export const deletedNodeSchema = z.looseObject({ deleted: z.string() });

/** The create request body (POST /api/v1/nodes); optional fields left out take the API's defaults. */
export interface CreateNodeRequest {
  name: string;
  address: string;
  controlPlaneUrl: string;
  surfaces: string[];
  region?: string;
  installDir?: string;
  caPem?: string;
  spoolQuotaGb?: number;
  spoolFullPolicy?: string;
  replicas?: number;
}
