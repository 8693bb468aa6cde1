/** Metrics as the pipeline sees them (owned by the metrics module): one call per finished request. */
import type { PipelineContext } from '../pipeline/context.js';
import type { HealthChange } from '../routing/target-health.js';

export interface PipelineMetrics {
  /**
   * Called by the runner when a request enters the pipeline (for the in-flight gauge). Optional so
   * test doubles may omit it; a request never started is simply not counted in flight.
   */
  requestStarted?(ctx: PipelineContext): void;
  /** Called once per request after the spool stage, with everything the request learnt. */
  requestFinished(ctx: PipelineContext): void;
  /** An upstream target was ejected (tried last) or answers again (routing/target-health.ts). Optional for test doubles. */
  upstreamTargetHealth?(upstream: string, model: string, change: HealthChange): void;
  /**
   * The request's final record was not written: refused without a valid key while the spool was
   * nearly full (pipeline/stages/spool.ts). Called before requestFinished. Optional for test doubles.
   */
  recordDropped?(ctx: PipelineContext): void;
}

export const noMetrics: PipelineMetrics = { requestFinished: () => undefined };
