// Stage `meter` — ctx.usage: the upstream's own counts when it sent them; otherwise, when an
// upstream answered (also for a stream cut short or a caller that left), an estimate from the
// prompt and the text delivered so far; nothing when no upstream answered.
import { estimateTokens } from '../../providers/token-estimate.js';
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const meterStage: Stage = {
  name: 'meter',
  always: true,
  run(ctx: PipelineContext): StageResult {
    if (ctx.upstreamUsage !== null) {
      ctx.usage = { ...ctx.upstreamUsage };
    } else if (ctx.served !== undefined) {
      ctx.usage = { inputTokens: ctx.estimatedInputTokens, outputTokens: estimateTokens(ctx.responseText), estimated: true };
    }
    return undefined;
  },
};
