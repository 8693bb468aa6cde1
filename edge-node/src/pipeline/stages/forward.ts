// Stage `forward` — the API's handler calls the plan's targets (retries/fallback) until one answers; ctx.reply.
import { API_HANDLERS } from '../../providers/api-handlers.js';
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const forwardStage: Stage = {
  name: 'forward',
  always: false,
  run(ctx: PipelineContext): Promise<StageResult> {
    return API_HANDLERS[ctx.api].forward(ctx);
  },
};
