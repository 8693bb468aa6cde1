// Stage `forward` — once the request's open row is durable (preauthorise), the API's handler calls
// the plan's targets (retries/fallback) until one answers; ctx.reply. Waiting for the row first
// means a crash (kill -9) can never leave an upstream call, which the upstream bills, with no record
// of it: the row becomes an 'interrupted' record at the next start (docs/spool.md). It costs the
// request one group commit before its upstream call instead of after it. Then the request's credit
// reservation is marked forwarded (billing/lease-credit.ts): a restart releases only reservations
// of requests that never got this far.
import { isZenovaError } from '../../errors.js';
import { API_HANDLERS } from '../../providers/api-handlers.js';
import type { PipelineContext } from '../context.js';
import { rejectWith } from '../stage.js';
import type { Stage, StageResult } from '../stage.js';

function forwardMarked(ctx: PipelineContext): Promise<StageResult> | StageResult {
  const refused = ctx.deps.credit.beforeForward(ctx);
  if (refused !== undefined) return refused;
  return API_HANDLERS[ctx.api].forward(ctx);
}

export const forwardStage: Stage = {
  name: 'forward',
  always: false,
  run(ctx: PipelineContext): StageResult | Promise<StageResult> {
    const durable = ctx.openRowDurable;
    if (durable === null) return forwardMarked(ctx);
    return durable.then(
      () => forwardMarked(ctx),
      (err: unknown) => {
        // The open row could not be written (disk full or failing): refused, nothing sent upstream.
        if (isZenovaError(err)) return rejectWith(err);
        throw err;
      },
    );
  },
};
