// The `chat.completions` API: POST /v1/chat/completions, JSON and SSE, to OpenAI-compatible upstreams.
import type { RuntimeTarget } from '../../config/runtime-config.js';
import { isZenovaError } from '../../errors.js';
import type { PipelineContext, TextSlot, UpstreamUsage } from '../../pipeline/context.js';
import type { StageResult } from '../../pipeline/stage.js';
import { reservedOutputLimit } from '../../billing/request-cost.js';
import { forwardPlan } from '../../routing/forward-plan.js';
import type { AttemptResult } from '../../routing/forward-plan.js';
import { routeModel } from '../../routing/route-model.js';
import type { ApiHandler } from '../api-handler.js';
import { firstEventRead } from '../first-event.js';
import { deferJsonText, estimateInputTokens } from '../deferred-json-texts.js';
import { validateBody } from '../request-body.js';
import { FieldSlot, NO_TEXTS, RepeatedSlot, isRecord } from '../text-slot.js';
import { inBandFailure, notAnAnswer, notAnEventStream, readBilledAnswer, refuseEncodedAnswer, sendToUpstream } from '../upstream-call.js';
import { markPartial } from '../partial-texts.js';
import { AnnotationSlot, annotationSlots } from './chat-annotations.js';
import type { AnnotationSlotMaker } from './chat-annotations.js';
import { NameSlot, audioSlots, choiceCarriesOtherText, contentPartSlots, isKnownPart, isKnownToolCall, oddShapeSlots, otherMessageFieldSlots, otherToolCallKeySlots, reasoningItemSlots, reasoningRepeatsReasoningContent, unknownPartSlots, unknownTypeSlots } from './chat-content-parts.js';
import { billedAbovePriceParam, callerOutputLimit, callerWantsStreamUsage, chatChoiceCount, chatCompletionRequestSchema, fileIdRefusal, uncheckedOutputParam, upstreamChatBody } from './chat-request.js';
import type { ForwardedOutputLimit } from './chat-request.js';
import { chatStreamReply, chatUsage, dropLogprobs } from './chat-stream.js';
import { callerToolNames, undeclaredToolNameSlots } from './chat-tool-names.js';
import type { ChatStreamSource } from './chat-stream.js';
import type { UpstreamResponse } from '../../upstream/upstream-pool.js';
import type { AbortSwitch } from '../../pipeline/abort-switch.js';
import { withLongIntegersOf } from '../json-string-slots.js';

export const chatCompletionsApi: ApiHandler = {
  api: 'chat.completions',
  surface: 'model',
  identify(ctx: PipelineContext): StageResult {
    const valid = validateBody(chatCompletionRequestSchema, ctx.body);
    if (!valid.ok) return valid.rejection;
    const request = valid.value;
    // Its own code, as on /v1/messages, once the schema passed (not validateBody's
    // ZN_ERR_INVALID_REQUEST), and before the request counts as one for its model.
    const fileId = fileIdRefusal(request);
    if (fileId !== undefined) return fileId;
    ctx.forwardBody = request;
    ctx.model = request.model;
    ctx.stream = request.stream === true;
    // Per choice: the worst case multiplies it by `n` (billing/request-cost.ts worstCaseOutputTokens).
    // With both fields set, the smaller: upstreamChatBody sends both as it.
    ctx.maxOutputTokens = callerOutputLimit(request);
    const texts: TextSlot[] = [];
    for (const message of request.messages) collectMessageTexts(message, texts);
    // A predicted output is text the model reads too (it may copy it into the answer).
    if (isRecord(request.prediction)) collectContentTexts(request.prediction, texts);
    ctx.inputTexts = texts;
    const unchecked = uncheckedOutputParam(request);
    if (unchecked !== undefined) ctx.uncheckedOutput = unchecked;
    const billedAbovePrice = billedAbovePriceParam(request);
    if (billedAbovePrice !== undefined) ctx.billedAbovePrice = billedAbovePrice;
    ctx.estimatedInputTokens = estimateInputTokens(texts);
    return undefined;
  },
  route(ctx: PipelineContext): StageResult {
    return routeModel(ctx, 'openai');
  },
  forward(ctx: PipelineContext): Promise<StageResult> {
    return forwardPlan(ctx, (target, signal, timeoutMs) => attemptChat(ctx, target, signal, timeoutMs));
  },
};

/**
 * A message's text as slots: its content (collectContentTexts), the reasoning text some
 * OpenAI-compatible servers add (`reasoning_content`, `reasoning`, OpenRouter's
 * `reasoning_details` and LiteLLM's `thinking_blocks`: reasoningItemSlots), its `refusal`, its
 * `name` (NameSlot), its tool calls (toolCallSlots, functionSlots), its `annotations` (every string
 * but type tags and ids: chat-annotations.ts; `annotation` makes their slots), its `audio`'s
 * `transcript` and other strings (audioSlots), and every string under any other key
 * (otherMessageFieldSlots). A shape OpenAI never sends where the node reads a string or a call —
 * `reasoning`, `reasoning_content`, `refusal`, `name` or `audio.transcript` not a string,
 * `tool_calls` not an array, `function_call` or `audio` not an object — has every string and
 * number in it checked (oddShapeSlots). The same fields in a request's messages and an answer's
 * choices.
 */
function collectMessageTexts(message: Record<string, unknown>, into: TextSlot[], annotation: AnnotationSlotMaker = requestAnnotationSlot): void {
  collectContentTexts(message, into);
  for (const field of TEXT_FIELDS) {
    if (typeof message[field] !== 'string') oddShapeSlots(message, field, into, 0);
    // The same text under both reasoning names: checked, counted once (TextSlot.repeated).
    else if (field === 'reasoning' && reasoningRepeatsReasoningContent(message)) into.push(new RepeatedSlot(message, field));
    else into.push(new FieldSlot(message, field));
  }
  if (typeof message.name === 'string') into.push(new NameSlot(message, 'name'));
  else oddShapeSlots(message, 'name', into, 0);
  reasoningItemSlots(message, 'reasoning_details', into);
  if (Array.isArray(message.tool_calls)) toolCallSlots(message.tool_calls, into);
  else oddShapeSlots(message, 'tool_calls', into, 0);
  if (isRecord(message.function_call)) functionSlots(message.function_call, into);
  else oddShapeSlots(message, 'function_call', into, 0);
  reasoningItemSlots(message, 'thinking_blocks', into);
  if (message.annotations !== undefined && message.annotations !== null) annotationSlots(message, into, annotation);
  audioSlots(message, into);
  otherMessageFieldSlots(message, into);
}

/** A request's annotation string (an assistant message sent back with its citations): text forwarded to the upstream. */
const requestAnnotationSlot: AnnotationSlotMaker = (holder, key) => new FieldSlot(holder, key);

/**
 * A message's tool calls: a function call's `arguments` (functionSlots); a custom (freeform) tool
 * call's `custom.input`, plain text. A call of another type has a shape the node does not know:
 * every string in it is checked, as in a content part of an unknown type (chat-content-parts.ts),
 * and its `type` too, no tag the node knows (unknownTypeSlots). Of a `function` or `custom` call,
 * every string under a key the node does not read (on the call, in its `function` or `custom`
 * object) is checked as a message's unknown fields are (otherToolCallKeySlots). Shapes OpenAI never
 * sends — an entry that is not an object (`['aurora']`), `function` or `custom` not an object, a
 * name (the call's, at its top level too) or a custom input that is not a string — have every
 * string and number in them checked (oddShapeSlots). A name that is a string is the caller's own
 * in a request, left alone as its tool definitions are; a JSON answer's is checked when the
 * request declares no such tool (chat-tool-names.ts).
 */
function toolCallSlots(calls: unknown[], into: TextSlot[]): void {
  for (let position = 0; position < calls.length; position++) {
    const call: unknown = calls[position];
    if (!isRecord(call)) {
      oddShapeSlots(calls as unknown as Record<string, unknown>, String(position), into, 1);
      continue;
    }
    if (!isKnownToolCall(call)) {
      unknownPartSlots(call, into);
      unknownTypeSlots(call, into);
      continue;
    }
    otherToolCallKeySlots(call, 'call', into);
    if (typeof call.name !== 'string') oddShapeSlots(call, 'name', into, 1);
    const { custom } = call;
    if (isRecord(call.function)) functionSlots(call.function, into);
    else oddShapeSlots(call, 'function', into, 1);
    if (isRecord(custom)) {
      if (typeof custom.input === 'string') into.push(new FieldSlot(custom, 'input'));
      else oddShapeSlots(custom, 'input', into, 2);
      if (typeof custom.name !== 'string') oddShapeSlots(custom, 'name', into, 2);
      otherToolCallKeySlots(custom, 'custom', into);
    } else {
      oddShapeSlots(call, 'custom', into, 1);
    }
  }
}

/**
 * A tool call's `function` or a legacy `function_call`: its `arguments` (a JSON text, or an object
 * sent in its place), their strings deferred until guardrails have rules to check them with
 * (deferred-json-texts.ts); a `name` that is not a string (an odd shape) and the strings under its
 * other keys are checked as in toolCallSlots.
 */
function functionSlots(fn: Record<string, unknown>, into: TextSlot[]): void {
  deferJsonText(into, fn, 'arguments');
  if (typeof fn.name !== 'string') oddShapeSlots(fn, 'name', into, 2);
  otherToolCallKeySlots(fn, 'function', into);
}

/**
 * The `content` of a message or of a request's `prediction`: a string, or parts (chat-content-parts.ts:
 * each part's `text`, a refusal part's `refusal` (which an assistant message sent back carries),
 * text nested in reasoning parts, every string of a part of an unknown type, its `type` too; not
 * media).
 */
function collectContentTexts(holder: Record<string, unknown>, into: TextSlot[]): void {
  const content = holder.content;
  if (typeof content === 'string') into.push(new FieldSlot(holder, 'content'));
  else if (Array.isArray(content)) contentPartSlots(content, into);
  // One part object in place of parts: not a shape OpenAI sends (a request with it is refused),
  // so an answer's is read as a part of an unknown type, every string in it checked (fail closed),
  // its `type` too when that is no tag the node knows.
  else if (isRecord(content)) {
    unknownPartSlots(content, into);
    if (!isKnownPart(content)) unknownTypeSlots(content, into);
  }
}

/**
 * An answer's choice message as slots: its texts (collectMessageTexts; its `annotations`' strings,
 * a `url_citation`'s title and URL, are not the model's words: AnnotationSlot), and the names of its
 * tool calls that none of the caller's tools (`declared`) has (chat-tool-names.ts). The audio
 * itself (`audio.data`) is speech the rules cannot read, so a message carrying it marks the list
 * partial: output rules block the answer (fail closed).
 */
function collectAnswerTexts(message: Record<string, unknown>, declared: ReadonlySet<string>, into: TextSlot[]): void {
  collectMessageTexts(message, into, (holder, key) => new AnnotationSlot(holder, key));
  undeclaredToolNameSlots(message, declared, into);
  const audio = message.audio;
  if (isRecord(audio) && audio.data !== undefined && audio.data !== null && audio.data !== '') markPartial(into);
}

/** A message's plain-text fields besides content. */
const TEXT_FIELDS = ['reasoning_content', 'reasoning', 'refusal'] as const;

/** The reserved per-choice output limit to send to this target (billing/request-cost.ts); undefined when unpriced. */
function forwardedOutputLimit(ctx: PipelineContext, target: RuntimeTarget): ForwardedOutputLimit | undefined {
  const tokens = reservedOutputLimit(ctx);
  return tokens === undefined ? undefined : { tokens, kind: target.upstream.kind };
}

async function attemptChat(ctx: PipelineContext, target: RuntimeTarget, signal: AbortSwitch, timeoutMs: number): Promise<AttemptResult> {
  const request = ctx.forwardBody ?? {};
  const alias = ctx.model ?? target.upstreamModel;
  const upstream = target.upstream.name;
  const sentAt = ctx.clock.monotonic();
  const sent = await sendToUpstream(
    ctx,
    target,
    {
      method: 'POST',
      path: '/chat/completions',
      body: withLongIntegersOf(ctx.http.bodyText, JSON.stringify(upstreamChatBody(request, target.upstreamModel, ctx.stream, forwardedOutputLimit(ctx, target)))),
      accept: ctx.stream ? 'text/event-stream' : 'application/json',
    },
    signal,
    timeoutMs,
  );
  if (sent.kind === 'failed') return sent;
  const { response } = sent;
  if (ctx.stream) return attemptStream(ctx, response, { upstream, upstreamKey: target.upstream.apiKey, signal, sentAt, choices: chatChoiceCount(request), timeoutMs }, alias, request);
  const read = await readBilledAnswer(response, upstream, signal, { asWritten: true });
  if ('failed' in read) return read.failed;
  const { answer } = read;
  const inBand = inBandFailure(answer, upstream, response.statusCode, target.upstream.apiKey);
  if (inBand !== undefined) return inBand;
  if (!isChatCompletion(answer)) return notAnAnswer(upstream, response.statusCode, 'a chat completion');
  if (typeof answer.model === 'string') answer.model = alias;
  ctx.upstreamUsage = chatUsage(answer.usage, false);
  let texts: TextSlot[] = NO_TEXTS;
  if (Array.isArray(answer.choices)) {
    texts = [];
    const declared = callerToolNames(request);
    for (const choice of answer.choices) {
      const message = isRecord(choice) ? choice.message : undefined;
      if (isRecord(message)) collectAnswerTexts(message, declared, texts);
      // Text beside the message (`text`, a `delta`, as some compatible servers send): output rules block it.
      if (isRecord(choice) && choiceCarriesOtherText(choice, 'message')) markPartial(texts);
    }
  }
  const keepChecked = (): void => void dropLogprobs(answer.choices);
  return { kind: 'answered', reply: { kind: 'json', status: 200, headers: {}, body: answer, texts, keepChecked } };
}

/** A chat completion's usage (chatUsage), for one answered as JSON to a stream request (notAnEventStream). */
function chatCompletionUsage(answer: Record<string, unknown>): UpstreamUsage | null | undefined {
  return isChatCompletion(answer) ? chatUsage(answer.usage, false) : undefined;
}

/** Whether a 2xx JSON body is a chat completion, not something else (`{}`, another API's answer). */
function isChatCompletion(answer: Record<string, unknown>): boolean {
  return answer.object === 'chat.completion' || Array.isArray(answer.choices);
}

/**
 * A stream's attempt ends with its first event read: until then nothing reached the caller, so an
 * upstream that resets, stalls, sends only keep-alive comments, reports an error or ends at once
 * fails the attempt (under its timeout) and the route's retries and fallbacks still apply.
 */
async function attemptStream(
  ctx: PipelineContext,
  response: UpstreamResponse,
  source: ChatStreamSource,
  alias: string,
  request: Record<string, unknown>,
): Promise<AttemptResult> {
  // A compressed stream would parse as no events ("ended the stream before [DONE]"): named as the JSON path names it.
  refuseEncodedAnswer(response, source.upstream);
  const contentType = response.headers['content-type'];
  // A JSON error object is that error (retried, fallen back from); other JSON an upstream that ignored
  // stream:true (final; a whole answer is charged, with its usage: the upstream billed it).
  // Media types are case-insensitive (`Text/Event-Stream` is one).
  if (typeof contentType !== 'string' || !contentType.toLowerCase().includes('text/event-stream')) return notAnEventStream(response, source.upstream, source.signal, chatCompletionUsage, source.upstreamKey);
  const reply = chatStreamReply(ctx, response, alias, !callerWantsStreamUsage(request), source);
  try {
    reply.events = await firstEventRead(reply.events);
  } catch (err) {
    // Aborts (the attempt's timeout, the caller leaving) are forwardPlan's to sort out.
    if (source.signal.aborted || !isZenovaError(err)) throw err;
    const outcome = err.code === 'ZN_ERR_UPSTREAM_TIMEOUT' ? 'timeout' : err.code === 'ZN_ERR_UPSTREAM_UNAVAILABLE' ? 'connect' : 'error';
    return { kind: 'failed', error: err, outcome, httpStatus: outcome === 'error' ? response.statusCode : null, retryable: err.retryable };
  }
  return { kind: 'answered', reply };
}
