// Stage `settle` — the actual cost from the metered usage and prices, for the record; the lease is
// charged it (and the rest released) once the record is committed, by the spool stage (billing/).
import { isPriced } from '../../billing/request-cost.js';
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const settleStage: Stage = {
  name: 'settle',
  always: true,
  run(ctx: PipelineContext): StageResult {
    ctx.deps.credit.settle(ctx);
    // preauthorise decides `priced`; a request refused before it (a guardrail, a rate limit, a body
    // billed above the price) never got there (stagesUs names every stage the runner ran), and its
    // record would say its model had no price. Set after the credit's settle, so what it charges is
    // unchanged (nothing: no upstream answered).
    if (ctx.stagesUs.preauthorise === undefined) ctx.cost.priced = isPriced(ctx);
    return undefined;
  },
};
