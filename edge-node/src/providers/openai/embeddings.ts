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
import { inBandFailure, readJsonObject, sendToUpstream } from '../upstream-call.js';
import type { AbortSwitch } from '../../pipeline/abort-switch.js';
import { embeddingsInputProblem } from './embeddings-input.js';

// `input` is checked by hand (embeddings-input.ts), never by a zod union over caller arrays.
const embeddingsRequestSchema = z.looseObject({
  model: z.string().min(1).max(256),
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

async function attemptEmbeddings(ctx: PipelineContext, target: RuntimeTarget, signal: AbortSwitch, timeoutMs: number): Promise<AttemptResult> {
  const sent = await sendToUpstream(
    ctx,
    target,
    { method: 'POST', path: '/embeddings', body: JSON.stringify({ ...ctx.forwardBody, model: target.upstreamModel }) },
    signal,
    timeoutMs,
  );
  if (sent.kind === 'failed') return sent;
  const answer = await readJsonObject(sent.response, target.upstream.name, signal);
  const inBand = inBandFailure(answer, target.upstream.name, sent.response.statusCode);
  if (inBand !== undefined) return inBand;
  if (typeof answer.model === 'string') answer.model = ctx.model ?? target.upstreamModel;
  // No valid prompt_tokens: stage meter estimates the input (an embedding has no output to count).
  const usage = isRecord(answer.usage) ? tokenCount(answer.usage.prompt_tokens) : undefined;
  ctx.upstreamUsage = usage === undefined ? null : { inputTokens: usage, outputTokens: 0, partial: false };
  return { kind: 'answered', reply: { kind: 'json', status: 200, headers: {}, body: answer, texts: NO_TEXTS } };
}
