// Stage `settle` — the actual cost from the metered usage and prices; the rest of the reservation released (billing/).
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const settleStage: Stage = {
  name: 'settle',
  always: true,
  run(ctx: PipelineContext): StageResult {
    ctx.deps.credit.settle(ctx);
    return undefined;
  },
};
