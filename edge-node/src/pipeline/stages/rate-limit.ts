// Stage `rate-limit` — requests/min, tokens/min, concurrency per key and account (rate-limit/).
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const rateLimitStage: Stage = {
  name: 'rate-limit',
  always: false,
  run(ctx: PipelineContext): StageResult {
    return ctx.deps.limiter.admit(ctx);
  },
};
