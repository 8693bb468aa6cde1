// Stage `meter` — ctx.usage: the upstream's own counts when it sent them; otherwise, when an
// upstream answered (also for a stream cut short or a caller that left), an estimate from the
// prompt and the text delivered so far (all of it, counted as it went: response-text.ts, not the
// bounded ctx.responseText); nothing when no upstream answered. Partial upstream counts
// (`estimated`: a stream that ended before its final usage) keep the input count and take the
// larger of the partial output count and the estimate from the delivered text. An estimated input
// adds the delivered texts the upstream bills as input but reports only in its final usage
// (ctx.deliveredInputTokens: an Anthropic server tool's results).
import type { PipelineContext } from '../context.js';
import { deliveredOutputTokens } from '../response-text.js';
import type { Stage, StageResult } from '../stage.js';

export const meterStage: Stage = {
  name: 'meter',
  always: true,
  run(ctx: PipelineContext): StageResult {
    const upstream = ctx.upstreamUsage;
    if (upstream !== null && !upstream.estimated) {
      ctx.usage = { ...upstream };
    } else if (upstream !== null) {
      ctx.usage = {
        inputTokens: (upstream.inputTokens > 0 ? upstream.inputTokens : ctx.estimatedInputTokens) + ctx.deliveredInputTokens,
        outputTokens: Math.max(upstream.outputTokens, deliveredOutputTokens(ctx)),
        estimated: true,
      };
    } else if (ctx.served !== undefined) {
      ctx.usage = { inputTokens: ctx.estimatedInputTokens + ctx.deliveredInputTokens, outputTokens: deliveredOutputTokens(ctx), estimated: true };
    }
    return undefined;
  },
};
