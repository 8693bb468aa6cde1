/**
 * The answer text the model wrote, as delivered (ctx.responseText and its counts): counted in full,
 * for the output estimate of a request the upstream gave no usage for (stage meter), and kept only
 * up to a bound, for the record. Counting as each text arrives keeps the estimate true for answers
 * far longer than the bound (a caller leaving before a stream's usage chunk must not make output
 * cheaper) without a second pass over text nor holding it.
 */
import { denseTextWeight, tokensForCharacters } from '../providers/token-estimate.js';
import type { PipelineContext, TextSlot } from './context.js';

/** Counts `text` as delivered and appends it to ctx.responseText as far as `maxKeptChars` allows. */
export function keepResponseText(ctx: PipelineContext, text: string, maxKeptChars: number): void {
  if (text.length === 0) return;
  ctx.responseTextChars += text.length;
  ctx.responseTextDenseWeight += denseTextWeight(text);
  const room = maxKeptChars - ctx.responseText.length;
  if (room > 0) ctx.responseText += text.length <= room ? text : text.slice(0, room);
}

/** Replaces what was delivered with `text` (a body checked whole, after a mask; '' when blocked). */
export function replaceResponseText(ctx: PipelineContext, text: string, maxKeptChars: number): void {
  ctx.responseText = '';
  ctx.responseTextChars = 0;
  ctx.responseTextDenseWeight = 0;
  keepResponseText(ctx, text, maxKeptChars);
}

/** The estimated tokens of all the text delivered (estimateTokens of it), however much was kept. */
export function deliveredOutputTokens(ctx: PipelineContext): number {
  return tokensForCharacters(ctx.responseTextChars, ctx.responseTextDenseWeight);
}

/**
 * Counts the model's texts (not TextSlot.notGenerated) as they reach the output rules, before a
 * rule holds, masks or blocks them: text a guardrail held when a stream stopped (blocked, the
 * caller gone, the upstream failing) or blocked whole was still generated, and billed upstream.
 */
export function countGuardedText(ctx: PipelineContext, texts: readonly TextSlot[]): void {
  for (const slot of texts) {
    if (slot.notGenerated === true) continue;
    const text = slot.text;
    if (text.length === 0) continue;
    ctx.guardedTextChars += text.length;
    ctx.guardedTextDenseWeight += denseTextWeight(text);
  }
}

/**
 * The output estimate when the upstream gave no (final) usage: the text delivered, or, when output
 * rules saw more of the model's text than went out (held or blocked), that text. Uncapped here:
 * stage meter caps it at the output limit sent upstream (request-cost.ts enforcedOutputTokens).
 */
export function estimatedOutputTokens(ctx: PipelineContext): number {
  const delivered = deliveredOutputTokens(ctx);
  return ctx.guardedTextChars === 0 ? delivered : Math.max(delivered, tokensForCharacters(ctx.guardedTextChars, ctx.guardedTextDenseWeight));
}
