// Stage `spool` — the request's final record (spool/request-record-builder.ts), durable before
// the caller's last byte: the runner holds the end of the answer back until this resolves.
import { buildRequestRecord, validRequestRecord } from '../../spool/request-record-builder.js';
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const spoolStage: Stage = {
  name: 'spool',
  always: true,
  async run(ctx: PipelineContext): Promise<StageResult> {
    const built = buildRequestRecord(ctx, { keepBodies: ctx.deps.spool.keepsBodies() });
    const { record, reduced } = validRequestRecord(built);
    if (reduced !== null) ctx.deps.logger.error({ requestId: record.requestId, reason: reduced }, 'request record failed its schema; spooled without attempts, verdicts and bodies');
    await ctx.deps.spool.finalise(record);
    return undefined;
  },
};
