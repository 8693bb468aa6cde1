// Stage `meter` — ctx.usage from the upstream usage, else estimated.
// Owner: pipeline-core. Stub until then: continues.
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const meterStage: Stage = {
  name: 'meter',
  always: true,
  run(ctx: PipelineContext): StageResult {
    void ctx;
    return undefined;
  },
};
