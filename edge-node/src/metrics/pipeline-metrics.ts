/** Metrics as the pipeline sees them (owned by the metrics module): one call per finished request. */
import type { PipelineContext } from '../pipeline/context.js';

export interface PipelineMetrics {
  /** Called once per request after the spool stage, with everything the request learnt. */
  requestFinished(ctx: PipelineContext): void;
}

export const noMetrics: PipelineMetrics = { requestFinished: () => undefined };
