// Stage `settle` — the actual cost from the metered usage and prices, for the record; the lease is
// charged it (and the rest released) once the record is committed, by the spool stage (billing/).
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
