// Stage `forward` — call the plan's targets with retries/fallback until one answers; ctx.reply.
// Owner: pipeline-core. Stub until then: continues.
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const forwardStage: Stage = {
  name: 'forward',
  always: false,
  run(ctx: PipelineContext): StageResult {
    void ctx;
    return undefined;
  },
};
