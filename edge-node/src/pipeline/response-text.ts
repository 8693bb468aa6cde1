/**
 * The answer text the model wrote, as delivered (ctx.responseText and its counts): counted in full,
 * for the output estimate of a request the upstream gave no usage for (stage meter), and kept only
 * up to a bound, for the record. Counting as each text arrives keeps the estimate true for answers
 * far longer than the bound (a caller leaving before a stream's usage chunk must not make output
 * cheaper) without a second pass over text nor holding it.
 */
import { cjkCharacters, tokensForCharacters } from '../providers/token-estimate.js';
import type { PipelineContext } from './context.js';

/** Counts `text` as delivered and appends it to ctx.responseText as far as `maxKeptChars` allows. */
export function keepResponseText(ctx: PipelineContext, text: string, maxKeptChars: number): void {
  if (text.length === 0) return;
  ctx.responseTextChars += text.length;
  ctx.responseTextCjkChars += cjkCharacters(text);
  const room = maxKeptChars - ctx.responseText.length;
  if (room > 0) ctx.responseText += text.length <= room ? text : text.slice(0, room);
}

/** Replaces what was delivered with `text` (a body checked whole, after a mask; '' when blocked). */
export function replaceResponseText(ctx: PipelineContext, text: string, maxKeptChars: number): void {
  ctx.responseText = '';
  ctx.responseTextChars = 0;
  ctx.responseTextCjkChars = 0;
  keepResponseText(ctx, text, maxKeptChars);
}

/** The estimated tokens of all the text delivered (estimateTokens of it), however much was kept. */
export function deliveredOutputTokens(ctx: PipelineContext): number {
  return tokensForCharacters(ctx.responseTextChars, ctx.responseTextCjkChars);
}
