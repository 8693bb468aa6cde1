/**
 * `usage` for an answer whose upstream sent none. Anthropic always sends it (message_start's
 * message, message_delta, a JSON message) and its SDKs read it unguarded: the official SDK's
 * MessageStream reads `usage.output_tokens` of every message_delta and writes it into the
 * message_start's `usage`, so a compatible upstream that leaves it out fails the caller's
 * `finalMessage()` ("Cannot read properties of undefined (reading 'output_tokens')"), and the SDKs'
 * types promise it on every message. The node fills in the counts it meters such an answer with
 * (stage meter: the prompt's estimate, the text delivered, at most max_tokens), so the caller sees
 * what the record says (`estimated`). An answer that carries `usage` goes on as it came, and the
 * filled counts are never read back as the upstream's (ctx.upstreamUsage). A stream whose upstream
 * gave some counts but not the final ones (a running count in an early message_delta, the final one
 * without usage) gets the counts stage meter records from those (recordedCounts: the same function).
 * A message_delta whose `usage` came without a valid `output_tokens` (`{}`, the input counters only,
 * a string, a fraction) is filled the same way, in that field: the SDKs read it whatever else the
 * usage holds, so relayed as it came the caller's final message says `output_tokens` undefined (or
 * keeps a stale running count) while the record meters the answer from the text delivered. It gets
 * the output count the record meters; the fields the upstream sent stay as they came (an
 * `input_tokens` it left out is filled as for a delta without usage, so `usage: {}` reads as none).
 * A JSON answer whose `usage` lacks a valid `output_tokens` is filled alike (messages.ts jsonReply:
 * that field the output count meteredCounts gives, an `input_tokens` left out its input count).
 */
import { enforcedOutputTokens } from '../../billing/request-cost.js';
import type { PipelineContext, TextSlot } from '../../pipeline/context.js';
import { meteredUsage } from '../../pipeline/stages/meter.js';
import { denseTextWeight, estimateTokens, tokensForCharacters } from '../token-estimate.js';

export interface MeteredCounts {
  inputTokens: number;
  outputTokens: number;
}

/**
 * The counts stage meter gives an answer without usage, as they stand now: the prompt's estimate
 * and the texts billed as input delivered; the model's text delivered (or, when output rules saw
 * more of it, what they saw), capped at the output limit sent upstream. `pending`: the texts of an
 * answer about to go out that the runner has not counted yet (a JSON answer's, counted at its
 * delivery, after it is serialised), counted as the runner will (run-pipeline.ts keepText).
 */
export function meteredCounts(ctx: PipelineContext, pending: readonly TextSlot[] = []): MeteredCounts {
  let inputTokens = ctx.estimatedInputTokens + ctx.deliveredInputTokens;
  let chars = ctx.responseTextChars;
  let dense = ctx.responseTextDenseWeight;
  for (const slot of pending) {
    if (slot.notGenerated === true) {
      if (slot.billedAsInput === true) inputTokens += estimateTokens(slot.text);
      continue;
    }
    chars += slot.text.length;
    dense += denseTextWeight(slot.text);
  }
  const delivered = tokensForCharacters(chars, dense);
  // As response-text.ts estimatedOutputTokens: text a rule held or blocked was still generated.
  const seen = ctx.guardedTextChars === 0 ? delivered : Math.max(delivered, tokensForCharacters(ctx.guardedTextChars, ctx.guardedTextDenseWeight));
  const limit = enforcedOutputTokens(ctx);
  return { inputTokens, outputTokens: limit === undefined ? seen : Math.min(seen, limit) };
}

/**
 * The counts stage meter records for the request as things stand now (meteredUsage, the very
 * function it records them with: the upstream's partial counts, at least the estimate, or its
 * final ones); meteredCounts when it would record none.
 */
export function recordedCounts(ctx: PipelineContext): MeteredCounts {
  const usage = meteredUsage(ctx);
  return usage === undefined ? meteredCounts(ctx) : { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens };
}
