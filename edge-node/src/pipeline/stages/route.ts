// Stage `route` — alias → weighted target plus fallbacks (ctx.plan).
// Owner: pipeline-core. Stub until then: continues.
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const routeStage: Stage = {
  name: 'route',
  always: false,
  run(ctx: PipelineContext): StageResult {
    void ctx;
    return undefined;
  },
};
