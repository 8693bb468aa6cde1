// The node's metrics and its 127.0.0.1-only admin port (owner: metrics module). Stub: none yet.
import type { Logger } from '../logger.js';
import { noMetrics } from './pipeline-metrics.js';
import type { PipelineMetrics } from './pipeline-metrics.js';

export interface NodeMetrics {
  metrics: PipelineMetrics;
  /** The admin listener's URL once listening (undefined when disabled). */
  adminUrl: string | undefined;
  close(): Promise<void>;
}

export interface NodeMetricsOptions {
  /** Where the admin port listens (host must be loopback); undefined = not started. */
  adminListen: { host: string; port: number } | undefined;
  /** Spool and backlog figures for the gauges. */
  figures: () => { spoolBytes: number; backfillBacklog: number };
  logger: Logger;
}

export async function createNodeMetrics(opts: NodeMetricsOptions): Promise<NodeMetrics> {
  void opts;
  return { metrics: noMetrics, adminUrl: undefined, close: async () => undefined };
}
