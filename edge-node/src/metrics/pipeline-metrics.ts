/** Metrics as the pipeline sees them (owned by the metrics module): one call per finished request. */
import type { RuntimeTarget } from '../config/runtime-config.js';
import type { ErrorCode } from '../errors.js';
import type { PipelineContext } from '../pipeline/context.js';
import type { HealthChange, TargetHealth } from '../routing/target-health.js';

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
   * Where the ejected-target gauge is read from at each scrape: the app's target health, over the
   * targets of the config served then (app.ts). Optional for test doubles.
   */
  watchTargetHealth?(health: TargetHealth, targets: () => Iterable<RuntimeTarget>): void;
  /**
   * A request that ended without entering the pipeline: refused before it (body, JSON, encoding,
   * path, URL), or its caller left before its body was in (app.ts). Optional for test doubles.
   */
  requestEndedBeforePipeline?(status: 'rejected' | 'failed' | 'aborted', code: ErrorCode | null): void;
  /**
   * The request's final record was not written: refused without a valid key while the spool was
   * nearly full (pipeline/stages/spool.ts). Called before requestFinished. Optional for test doubles.
   */
  recordDropped?(ctx: PipelineContext): void;
}

export const noMetrics: PipelineMetrics = { requestFinished: () => undefined };
