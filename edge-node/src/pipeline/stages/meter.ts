// Stage `meter` — ctx.usage: the upstream's own counts when it sent them; otherwise, when an
// upstream answered (also for a stream cut short or a caller that left), an estimate from the
// prompt and the text delivered so far (all of it, counted as it went: response-text.ts, not the
// bounded ctx.responseText), or from the model's text the output rules saw when they held or
// blocked some of it (response-text.ts); nothing when no upstream answered. Each count is taken on its own: a
// count the upstream did not validly give (UpstreamUsage: absent, null, not a non-negative safe
// integer) is estimated as if no usage had come, and the record says `estimated`; an exact 0 in
// its place would leave the tokens delivered unbilled. Partial upstream counts (`partial`: a
// stream that ended before its final usage) keep the input count (a 0 there is message_start's
// placeholder, estimated) and take the larger of the partial output count and the estimate from
// the delivered text. An estimated input adds the delivered texts the upstream bills as input but
// reports only in its final usage (ctx.deliveredInputTokens: an Anthropic server tool's results).
// Prompt-cache writes (UpstreamUsage.cacheWrites) are kept also when the input count they are part
// of is estimated (a cache-read counter not validly given): their premium is owed all the same. They
// are held to the input count charged (1-hour writes first, as a breakdown is held to its total),
// so no premium falls on tokens the input does not count.
// MCP calls are priced per call, not per token, and what a tool server relays (event-stream framing,
// hours of a GET stream's notifications) is no model output: their usage stays 0, not estimated.
// An output estimate is capped at the output limit sent upstream (request-cost.ts
// enforcedOutputTokens): ~4 characters per token overcounts text of long tokens, and an upstream
// obeying the limit writes no more, so a priced request's output stays within its reservation. A
// count the upstream gave (partial ones too) is billed as given, above the limit or not.
import { enforcedOutputTokens } from '../../billing/request-cost.js';
import type { CacheWrites, PipelineContext, Usage } from '../context.js';
import { estimatedOutputTokens } from '../response-text.js';
import type { Stage, StageResult } from '../stage.js';

/** Usage's `cacheWrites` field: `writes` held to `inputTokens` in all, the dearer 1-hour writes first; none when nothing is left. */
function writesWithin(writes: CacheWrites | undefined, inputTokens: number): { cacheWrites?: CacheWrites } {
  if (writes === undefined) return {};
  const oneHourTokens = Math.min(writes.oneHourTokens, inputTokens);
  const fiveMinuteTokens = Math.min(writes.fiveMinuteTokens, inputTokens - oneHourTokens);
  return fiveMinuteTokens === 0 && oneHourTokens === 0 ? {} : { cacheWrites: { fiveMinuteTokens, oneHourTokens } };
}

/**
 * The usage stage meter records for the request as it stands now (see above); undefined when it
 * records none (MCP, or no upstream answered). Providers that fill in counts an upstream left out
 * (providers/anthropic/filled-usage.ts) call it too, so the caller sees what the record says.
 */
export function meteredUsage(ctx: PipelineContext): Usage | undefined {
  if (ctx.api === 'mcp') return undefined;
  const upstream = ctx.upstreamUsage;
  const estimatedInput = (): number => ctx.estimatedInputTokens + ctx.deliveredInputTokens;
  const estimatedOutput = (): number => {
    const limit = enforcedOutputTokens(ctx);
    const estimate = estimatedOutputTokens(ctx);
    return limit === undefined ? estimate : Math.min(estimate, limit);
  };
  if (upstream !== null && upstream.partial) {
    const input = upstream.inputTokens;
    const inputKept = input !== undefined && input > 0;
    const inputTokens = (inputKept ? input : ctx.estimatedInputTokens) + ctx.deliveredInputTokens;
    return {
      inputTokens,
      outputTokens: Math.max(upstream.outputTokens ?? 0, estimatedOutput()),
      estimated: true,
      ...writesWithin(upstream.cacheWrites, inputTokens),
    };
  }
  if (upstream !== null) {
    const { inputTokens, outputTokens } = upstream;
    const inputCharged = inputTokens ?? estimatedInput();
    return {
      inputTokens: inputCharged,
      outputTokens: outputTokens ?? estimatedOutput(),
      estimated: inputTokens === undefined || outputTokens === undefined,
      ...writesWithin(upstream.cacheWrites, inputCharged),
    };
  }
  if (ctx.served !== undefined) return { inputTokens: estimatedInput(), outputTokens: estimatedOutput(), estimated: true };
  return undefined;
}

export const meterStage: Stage = {
  name: 'meter',
  always: true,
  run(ctx: PipelineContext): StageResult {
    const usage = meteredUsage(ctx);
    if (usage !== undefined) ctx.usage = usage;
    return undefined;
  },
};
