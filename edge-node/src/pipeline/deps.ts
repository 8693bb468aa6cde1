/**
 * What the pipeline's stages use beyond the request itself. Each part is an interface owned by
 * its module; serve.ts builds the real ones, tests pass their own.
 */
import type { Logger } from '../logger.js';
import type { Clock } from './clock.js';
import type { CreditLeases } from '../billing/credit-leases.js';
import type { PipelineMetrics } from '../metrics/pipeline-metrics.js';
import type { GetStreamStanding } from '../providers/mcp/get-stream-standing.js';
import type { SessionOwners } from '../providers/mcp/session-owners.js';
import type { RateLimiter } from '../rate-limit/rate-limiter.js';
import type { RequestSpool } from '../spool/request-spool.js';
import type { TargetHealth } from '../routing/target-health.js';
import type { UpstreamPool } from '../upstream/upstream-pool.js';

export interface PipelineDeps {
  /** The node's id (for records); 'local' in stand-alone mode. */
  nodeId: string;
  logger: Logger;
  upstreams: UpstreamPool;
  limiter: RateLimiter;
  credit: CreditLeases;
  spool: RequestSpool;
  metrics: PipelineMetrics;
  /** Which caller key each MCP session belongs to (in the state dir when serving, so restarts and replicas share it). */
  sessionOwners: SessionOwners;
  /** Which upstream targets keep failing, so plans try them last (per process, in memory). */
  targetHealth: TargetHealth;
  /**
   * Open MCP GET event streams, ended when their key stops standing under a new config or its
   * expiry (buildApp always sets it; deps built by hand in unit tests may leave it out).
   */
  getStreams?: GetStreamStanding;
  /** How long a caller may leave an answer unread before its connection is dropped; default CALLER_STALL_MS (run-pipeline.ts). */
  callerStallMs?: number;
  /** The requests' clock; systemClock by default. serve's knows the control plane's time (control-plane-time.ts). */
  clock?: Clock;
}
