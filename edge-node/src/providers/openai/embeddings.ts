// The `embeddings` API: POST /v1/embeddings to OpenAI-compatible upstreams; usage from usage.prompt_tokens.
import { z } from 'zod';
import type { RuntimeTarget } from '../../config/runtime-config.js';
import type { PipelineContext, TextSlot } from '../../pipeline/context.js';
import type { StageResult } from '../../pipeline/stage.js';
import { forwardPlan } from '../../routing/forward-plan.js';
import type { AttemptResult } from '../../routing/forward-plan.js';
import { routeModel } from '../../routing/route-model.js';
import type { ApiHandler } from '../api-handler.js';
import { invalidField, validateBody } from '../request-body.js';
import { FieldSlot, NO_TEXTS, isRecord, tokenCount } from '../text-slot.js';
import { estimateTokens } from '../token-estimate.js';
import { MAX_UPSTREAM_JSON_BYTES, inBandFailure, readBilledAnswer, sendToUpstream } from '../upstream-call.js';
import type { AbortSwitch } from '../../pipeline/abort-switch.js';
import { refusedRouterFields } from './chat-request.js';
import { embeddingsInputProblem } from './embeddings-input.js';
import { withLongIntegersOf } from '../json-string-slots.js';

/**
 * JSON text allowed per input in an embeddings answer: 32 bytes for each of 3072 dimensions
 * (text-embedding-3-large), room for a float written out in full precision with the indentation
 * of a pretty-printed answer (OpenAI's own answers are indented), or 24 bytes for each of 4096.
 */
export const EMBEDDING_ANSWER_BYTES_PER_INPUT = 96 * 1024;
/** The most an embeddings answer may be, whatever it asks: 2048 inputs (the most a request holds) at the allowance. */
export const MAX_EMBEDDINGS_ANSWER_BYTES = 192 * 1024 * 1024;

// `input` is checked by hand (embeddings-input.ts), never by a zod union over caller arrays.
// Other fields pass through, but those naming other models (refusedRouterFields).
const embeddingsRequestSchema = z.looseObject({
  model: z.string().min(1).max(256),
  ...refusedRouterFields,
});

export const embeddingsApi: ApiHandler = {
  api: 'embeddings',
  surface: 'model',
  identify(ctx: PipelineContext): StageResult {
    const valid = validateBody(embeddingsRequestSchema, ctx.body);
    if (!valid.ok) return valid.rejection;
    const request = valid.value;
    const problem = embeddingsInputProblem(request.input);
    if (problem !== undefined) return invalidField(problem.param, problem.reason);
    ctx.forwardBody = request;
    ctx.model = request.model;
    const texts: TextSlot[] = [];
    let tokens = 0;
    const input: unknown = request.input;
    if (typeof input === 'string') {
      texts.push(new FieldSlot(request, 'input'));
    } else if (Array.isArray(input)) {
      for (let i = 0; i < input.length; i++) {
        const item: unknown = input[i];
        if (typeof item === 'string') texts.push(new FieldSlot(input as unknown as Record<string, unknown>, String(i)));
        // Token-id inputs are already tokens.
        else if (typeof item === 'number') tokens += 1;
        else if (Array.isArray(item)) tokens += item.length;
      }
      // Token ids are text the node cannot read back (no tokenizer): input rules refuse them.
      if (typeof input[0] !== 'string') ctx.uncheckedInput = { param: 'input', what: 'token ids' };
    }
    for (const slot of texts) tokens += estimateTokens(slot.text);
    ctx.inputTexts = texts;
    ctx.estimatedInputTokens = tokens;
    return undefined;
  },
  route(ctx: PipelineContext): StageResult {
    return routeModel(ctx, 'openai');
  },
  forward(ctx: PipelineContext): Promise<StageResult> {
    return forwardPlan(ctx, (target, signal, timeoutMs) => attemptEmbeddings(ctx, target, signal, timeoutMs));
  },
};

/**
 * How many embeddings the request asks for: one per string or per array of token ids; a string, or
 * one array of token ids, is one.
 */
export function embeddingsInputCount(input: unknown): number {
  if (!Array.isArray(input) || input.length === 0 || typeof input[0] === 'number') return 1;
  return input.length;
}

/**
 * The bound on the upstream's answer to `input`: the allowance per input, never below the bound
 * of every other JSON answer (one input's answer carries its own overhead) nor above
 * MAX_EMBEDDINGS_ANSWER_BYTES. 2048 inputs of 3072 dimensions are ≈34 MB in base64 (what the openai
 * SDK asks for by default) and far more as floats: a fixed 32 MiB refused them after the upstream
 * had done (and billed) the work.
 */
export function embeddingsAnswerBound(input: unknown): number {
  const wanted = embeddingsInputCount(input) * EMBEDDING_ANSWER_BYTES_PER_INPUT;
  return Math.min(MAX_EMBEDDINGS_ANSWER_BYTES, Math.max(MAX_UPSTREAM_JSON_BYTES, wanted));
}

async function attemptEmbeddings(ctx: PipelineContext, target: RuntimeTarget, signal: AbortSwitch, timeoutMs: number): Promise<AttemptResult> {
  const sent = await sendToUpstream(
    ctx,
    target,
    { method: 'POST', path: '/embeddings', body: withLongIntegersOf(ctx.http.bodyText, JSON.stringify({ ...ctx.forwardBody, model: target.upstreamModel })) },
    signal,
    timeoutMs,
  );
  if (sent.kind === 'failed') return sent;
  // The upstream computed (and bills) every embedding of an answer too large to hold: the request
  // is charged its input estimate (no usage could be read), and not tried again.
  const read = await readBilledAnswer(sent.response, target.upstream.name, signal, { maxBytes: embeddingsAnswerBound(ctx.forwardBody?.input) });
  if ('failed' in read) return read.failed;
  const { answer } = read;
  const inBand = inBandFailure(answer, target.upstream.name, sent.response.statusCode, target.upstream.apiKey);
  if (inBand !== undefined) return inBand;
  if (typeof answer.model === 'string') answer.model = ctx.model ?? target.upstreamModel;
  // An embedding has no output, so total_tokens counts the input too when prompt_tokens is absent
  // (some OpenAI-compatible servers give only that). Neither valid: stage meter estimates the input.
  const usage = isRecord(answer.usage) ? (tokenCount(answer.usage.prompt_tokens) ?? tokenCount(answer.usage.total_tokens)) : undefined;
  ctx.upstreamUsage = usage === undefined ? null : { inputTokens: usage, outputTokens: 0, partial: false };
  return { kind: 'answered', reply: { kind: 'json', status: 200, headers: {}, body: answer, texts: NO_TEXTS } };
}
