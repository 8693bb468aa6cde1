// Stage `forward` — once the request's open row is durable (preauthorise), the API's handler calls
// the plan's targets (retries/fallback) until one answers; ctx.reply. Waiting for the row first
// means a crash (kill -9) can never leave an upstream call, which the upstream bills, with no record
// of it: the row becomes an 'interrupted' record at the next start (docs/spool.md). It costs the
// request one group commit before its upstream call instead of after it.
import { isZenovaError } from '../../errors.js';
import { API_HANDLERS } from '../../providers/api-handlers.js';
import type { PipelineContext } from '../context.js';
import { rejectWith } from '../stage.js';
import type { Stage, StageResult } from '../stage.js';

export const forwardStage: Stage = {
  name: 'forward',
  always: false,
  run(ctx: PipelineContext): Promise<StageResult> {
    const durable = ctx.openRowDurable;
    if (durable === null) return API_HANDLERS[ctx.api].forward(ctx);
    return durable.then(
      () => API_HANDLERS[ctx.api].forward(ctx),
      (err: unknown) => {
        // The open row could not be written (disk full or failing): refused, nothing sent upstream.
        if (isZenovaError(err)) return rejectWith(err);
        throw err;
      },
    );
  },
};
