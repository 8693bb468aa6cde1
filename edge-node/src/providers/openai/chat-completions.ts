// The `chat.completions` API: POST /v1/chat/completions, JSON and SSE, to OpenAI-compatible upstreams.
import type { RuntimeTarget } from '../../config/runtime-config.js';
import type { PipelineContext, TextSlot } from '../../pipeline/context.js';
import type { StageResult } from '../../pipeline/stage.js';
import { forwardPlan } from '../../routing/forward-plan.js';
import type { AttemptResult } from '../../routing/forward-plan.js';
import { routeModel } from '../../routing/route-model.js';
import type { ApiHandler } from '../api-handler.js';
import { validateBody } from '../request-body.js';
import { FieldSlot, NO_TEXTS, isRecord } from '../text-slot.js';
import { estimateTokens } from '../token-estimate.js';
import { readJsonObject, sendToUpstream } from '../upstream-call.js';
import { callerWantsStreamUsage, chatCompletionRequestSchema, upstreamChatBody } from './chat-request.js';
import { chatStreamReply, chatUsage } from './chat-stream.js';
import type { AbortSwitch } from '../../pipeline/abort-switch.js';

export const chatCompletionsApi: ApiHandler = {
  api: 'chat.completions',
  surface: 'model',
  identify(ctx: PipelineContext): StageResult {
    const valid = validateBody(chatCompletionRequestSchema, ctx.body);
    if (!valid.ok) return valid.rejection;
    const request = valid.value;
    ctx.forwardBody = request;
    ctx.model = request.model;
    ctx.stream = request.stream === true;
    ctx.maxOutputTokens = request.max_completion_tokens ?? request.max_tokens ?? null;
    const texts: TextSlot[] = [];
    for (const message of request.messages) collectMessageTexts(message, texts);
    ctx.inputTexts = texts;
    let tokens = 0;
    for (const slot of texts) tokens += estimateTokens(slot.text);
    ctx.estimatedInputTokens = tokens;
    return undefined;
  },
  route(ctx: PipelineContext): StageResult {
    return routeModel(ctx, 'openai');
  },
  forward(ctx: PipelineContext): Promise<StageResult> {
    return forwardPlan(ctx, (target, signal, timeoutMs) => attemptChat(ctx, target, signal, timeoutMs));
  },
};

/** Message content as slots: a string content, or the `text` of each text part. */
function collectMessageTexts(message: Record<string, unknown>, into: TextSlot[]): void {
  const content = message.content;
  if (typeof content === 'string') {
    into.push(new FieldSlot(message, 'content'));
  } else if (Array.isArray(content)) {
    for (const part of content) if (isRecord(part) && typeof part.text === 'string') into.push(new FieldSlot(part, 'text'));
  }
}

async function attemptChat(ctx: PipelineContext, target: RuntimeTarget, signal: AbortSwitch, timeoutMs: number): Promise<AttemptResult> {
  const request = ctx.forwardBody ?? {};
  const alias = ctx.model ?? target.upstreamModel;
  const sent = await sendToUpstream(
    ctx,
    target,
    {
      method: 'POST',
      path: '/chat/completions',
      body: JSON.stringify(upstreamChatBody(request, target.upstreamModel, ctx.stream)),
      accept: ctx.stream ? 'text/event-stream' : 'application/json',
    },
    signal,
    timeoutMs,
  );
  if (sent.kind === 'failed') return sent;
  const { response } = sent;
  const contentType = response.headers['content-type'];
  if (ctx.stream && typeof contentType === 'string' && contentType.includes('text/event-stream')) {
    return { kind: 'answered', reply: chatStreamReply(ctx, response, alias, !callerWantsStreamUsage(request)) };
  }
  const answer = await readJsonObject(response, target.upstream.name, signal);
  if (typeof answer.model === 'string') answer.model = alias;
  ctx.upstreamUsage = chatUsage(answer.usage);
  let texts: TextSlot[] = NO_TEXTS;
  if (Array.isArray(answer.choices)) {
    texts = [];
    for (const choice of answer.choices) {
      const message = isRecord(choice) ? choice.message : undefined;
      if (isRecord(message) && typeof message.content === 'string') texts.push(new FieldSlot(message, 'content'));
    }
  }
  return { kind: 'answered', reply: { kind: 'json', status: 200, headers: {}, body: answer, texts } };
}
