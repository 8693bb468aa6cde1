// Stage `spool` — the request's final record (spool/request-record-builder.ts, valid by
// construction), durable before the caller's last byte: the runner holds the end of the answer
// back until this resolves.
import { buildRequestRecord } from '../../spool/request-record-builder.js';
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const spoolStage: Stage = {
  name: 'spool',
  always: true,
  async run(ctx: PipelineContext): Promise<StageResult> {
    await ctx.deps.spool.finalise(buildRequestRecord(ctx, { keepBodies: ctx.deps.spool.keepsBodies() }));
    // The record carrying the cost is durable: the credit lease is charged it now (billing/lease-credit.ts).
    ctx.deps.credit.recordCommitted(ctx);
    return undefined;
  },
};
