// The node's metrics and its loopback-only admin port (GET /metrics, GET /healthz).
import type { Logger } from '../logger.js';
import { startAdminServer } from './admin-server.js';
import type { AdminServer } from './admin-server.js';
import { startEventLoopMetrics } from './event-loop-metrics.js';
import { startGcMetrics } from './gc-metrics.js';
import { createNodePipelineMetrics } from './node-pipeline-metrics.js';
import type { NodeFigures } from './node-pipeline-metrics.js';
import type { PipelineMetrics } from './pipeline-metrics.js';
import { replicaIndex } from './replica-admin.js';

export interface NodeMetrics {
  metrics: PipelineMetrics;
  /** The admin listener's URL once listening (undefined when disabled, and in a replica: the supervisor listens). */
  adminUrl: string | undefined;
  /** The current metrics text (what /metrics serves). */
  render(): string;
  close(): Promise<void>;
}

export interface NodeMetricsOptions {
  /** Where the admin port listens (host must be loopback); undefined = not started. */
  adminListen: { host: string; port: number } | undefined;
  /** Spool and backlog figures for the gauges. */
  figures: () => NodeFigures;
  logger: Logger;
}

/**
 * Metrics are always collected (cheap); the admin port only starts when asked. A non-loopback
 * address rejects with AdminListenRefusedError before anything listens.
 */
export async function createNodeMetrics(opts: NodeMetricsOptions): Promise<NodeMetrics> {
  const metrics = createNodePipelineMetrics(opts.figures);
  const gc = startGcMetrics();
  const loop = startEventLoopMetrics();
  const render = (): string => metrics.render() + gc.render() + loop.render();
  const stopProcessMetrics = (): void => {
    gc.stop();
    loop.stop();
  };
  let admin: AdminServer | undefined;
  const replica = replicaIndex() !== undefined;
  if (opts.adminListen !== undefined) {
    try {
      admin = await startAdminServer({ host: opts.adminListen.host, port: opts.adminListen.port, renderMetrics: render });
    } catch (err) {
      stopProcessMetrics();
      throw err;
    }
    // A replica binds nothing (its supervisor listens and asks it over IPC): an "admin listening"
    // line here would name a port nobody listens on, and a tool waiting for that line could take it.
    if (replica) opts.logger.debug('metrics answered over IPC to the supervisor, which holds the admin port');
    else opts.logger.info({ url: admin.url }, 'admin listening');
  }
  return {
    metrics,
    adminUrl: replica ? undefined : admin?.url,
    render,
    close: async () => {
      stopProcessMetrics();
      await admin?.close();
    },
  };
}
