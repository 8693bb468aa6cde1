/**
 * Everything the pipeline uses besides config and upstreams, opened in one place for `serve`:
 * the spool (and its backfill channel), rate limiter, credit leases (and their channel), MCP session
 * owners, upstream target health and metrics (and the admin port). Each comes from its own module's factory.
 */
import { createNodeCredit } from '../billing/create-node-credit.js';
import type { CreditPolicy } from '../billing/credit-policy.js';
import type { ConfigHolder } from '../config/config-holder.js';
import type { ControlChannel } from '../control/control-channel.js';
import type { Logger } from '../logger.js';
import { createNodeMetrics } from '../metrics/create-node-metrics.js';
import type { NodeFigures } from '../metrics/node-pipeline-metrics.js';
import type { PipelineDeps } from '../pipeline/deps.js';
import { openSessionOwners } from '../providers/mcp/session-owners.js';
import { createNodeRateLimiter, replicasFromEnv } from '../rate-limit/create-node-rate-limiter.js';
import { openNodeSpool } from '../spool/open-node-spool.js';
import type { SpoolState, SpoolSynchronous } from '../spool/spool-store.js';
import { TargetHealth } from '../routing/target-health.js';

export type PipelineServices = Pick<PipelineDeps, 'nodeId' | 'limiter' | 'credit' | 'spool' | 'metrics' | 'sessionOwners' | 'targetHealth'>;

export interface NodeServices {
  pipeline: PipelineServices;
  channels: ControlChannel[];
  figures(): NodeFigures;
  /** The spool's fill and failing writes (NodeSpool.state); undefined without a spool. */
  spoolState(): SpoolState | undefined;
  onSpoolStateChanged(listener: () => void): void;
  adminUrl: string | undefined;
  /**
   * The node is stopping and has drained its requests: give credit back while the session is up.
   * Resolves once the control plane confirmed it (bounded), so the stream may then be ended.
   */
  beforeControlStop(): Promise<void>;
  close(): Promise<void>;
}

export interface NodeServicesOptions {
  stateDir: string | undefined;
  /** The enrolled node's id; 'local' in stand-alone mode. */
  nodeId: string;
  holder: ConfigHolder;
  logger: Logger;
  /** ZENOVA_NODE_REPLICAS is read from here by the spool (a second process at 1 is refused) and the rate limiter. */
  env: NodeJS.ProcessEnv;
  /** Read up front with the other settings (serve-settings.ts). */
  creditPolicy: CreditPolicy;
  spoolSynchronous: SpoolSynchronous;
  adminListen: { host: string; port: number } | undefined;
}

/**
 * Opens them in order; if one fails, those already open are closed and the error is thrown. They
 * close in reverse, except the spool, which closes right after the admin port: its close commits
 * (or gives up on) the records requests still wait on at a stop, and those requests then charge or
 * release their credit reservations and rate-limit slots, so the services they write to must still
 * be open (closed before it, the lease store refused the charge: "The database connection is not open").
 */
export async function openNodeServices(opts: NodeServicesOptions): Promise<NodeServices> {
  const closers: Array<() => Promise<void>> = [];
  let closeAdminPort: (() => Promise<void>) | undefined;
  let closeSpool: (() => Promise<void>) | undefined;
  const closeOne = (close: () => Promise<void>): Promise<void> => close().catch((err: unknown) => opts.logger.warn({ err }, 'closing a node service failed'));
  const closeAll = async (): Promise<void> => {
    const [adminPort, spool] = [closeAdminPort, closeSpool];
    closeAdminPort = closeSpool = undefined;
    if (adminPort !== undefined) await closeOne(adminPort);
    if (spool !== undefined) {
      await closeOne(spool);
      // The requests it settled go on in promise callbacks only (the spool stage's charge, the
      // request's cleanups): all have run by the next turn of the event loop.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    for (const close of closers.splice(0).reverse()) await closeOne(close);
  };
  try {
    // With the replica count: a second process on the state dir at 1 is refused there.
    const spool = await openNodeSpool({ ...opts, synchronous: opts.spoolSynchronous, replicas: replicasFromEnv(opts.env) });
    closeSpool = () => spool.close();
    const limiter = await createNodeRateLimiter(opts);
    closers.push(async () => limiter.close());
    const earlier = spool.earlierRuns;
    const credit = await createNodeCredit({
      ...opts,
      policy: opts.creditPolicy,
      // After the spool: its interrupted rows are recovered, and it tells which reservations never reached it.
      evidence:
        earlier === undefined
          ? undefined
          : {
              owner: earlier.ownerSlot,
              ownerGone: (slot) => earlier.isOwnerGone(slot),
              holdsRequest: (id) => earlier.holdsRequest(id),
              finalCost: (id) => earlier.finalCostOf(id),
            },
    });
    closers.push(() => credit.close());
    const sessionOwners = openSessionOwners(opts.stateDir, opts.logger);
    closers.push(async () => sessionOwners.close());
    const metrics = await createNodeMetrics({ adminListen: opts.adminListen, figures: () => spool.figures(), logger: opts.logger });
    closeAdminPort = () => metrics.close();
    return {
      pipeline: { nodeId: opts.nodeId, limiter, credit: credit.credit, spool: spool.spool, metrics: metrics.metrics, sessionOwners, targetHealth: new TargetHealth() },
      channels: [spool.channel, credit.channel].filter((c): c is ControlChannel => c !== undefined),
      figures: () => spool.figures(),
      spoolState: () => spool.state(),
      onSpoolStateChanged: (listener) => spool.onStateChanged(listener),
      adminUrl: metrics.adminUrl,
      beforeControlStop: async () => credit.returnLeases?.(),
      close: closeAll,
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}
