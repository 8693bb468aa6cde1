/**
 * The `messages` API: Anthropic's POST /v1/messages, JSON and SSE, forwarded to upstreams of kind
 * `anthropic`. An anthropic upstream's baseUrl is its API base including the version segment, e.g.
 * https://api.anthropic.com/v1; the node posts to `${baseUrl}/messages` with the upstream's secret
 * as `x-api-key` (never the caller's key), the caller's `anthropic-version` (else 2023-06-01) and
 * `anthropic-beta` (but fast mode's and server-side fallbacks'), and the target's own model name.
 * Callers see their alias in `model`.
 */
import type { RuntimeTarget } from '../../config/runtime-config.js';
import { isZenovaError, zenovaError } from '../../errors.js';
import type { ZenovaError } from '../../errors.js';
import type { PipelineContext, StreamEvent, TextSlot, UpstreamReply, UpstreamUsage } from '../../pipeline/context.js';
import { reject, rejectWith } from '../../pipeline/stage.js';
import type { StageResult } from '../../pipeline/stage.js';
import { forwardPlan } from '../../routing/forward-plan.js';
import type { AttemptResult } from '../../routing/forward-plan.js';
import { routeModel } from '../../routing/route-model.js';
import type { ApiHandler } from '../api-handler.js';
import { validateBody } from '../request-body.js';
import { isRecord, tokenCount } from '../text-slot.js';
import { inBandFailure, notAnAnswer, notAnEventStream, passedHeaders, readBilledAnswer, refuseEncodedAnswer, sendToUpstream } from '../upstream-call.js';
import { upstreamRetryAfterSeconds } from '../../upstream/upstream-failure.js';
import { anthropicErrorBodyOf, firstEventErrorAnswer, firstEventErrorStatus } from './anthropic-errors.js';
import {
  billedAbovePriceParam,
  callerChosenStrings,
  answerContentSlots,
  fileIdParam,
  inputTextSlots,
  otherAnswerKeySlots,
  longestPromptCacheTtl,
  messagesRequestSchema,
  unchosenAnswerSlots,
} from './messages-request.js';
import { anthropicCacheWrites, anthropicInputTokens, anthropicStreamEvents, deltaEventLike, errorStreamEvent } from './messages-stream.js';
import { firstEventRead } from '../first-event.js';
import { sseIdleDeadline } from '../sse.js';
import { estimateInputTokens } from '../deferred-json-texts.js';
import type { AbortSwitch } from '../../pipeline/abort-switch.js';
import { stringifyAsWritten, withLongIntegersOf } from '../json-string-slots.js';
import { meteredCounts } from './filled-usage.js';

export const DEFAULT_ANTHROPIC_VERSION = '2023-06-01';
/** Version dates and comma-separated beta names; anything else is refused rather than forwarded. */
const VERSION_PATTERN = /^[0-9]{4}-[0-9]{2}-[0-9]{2}$/;
const BETA_NAME = /^[A-Za-z0-9._-]{1,128}$/;
const MAX_BETAS = 32;
/**
 * Betas billed above the price this node charges (fast mode: `fast-mode-2026-02-01`), refused like
 * `speed: "fast"`. Server tools' betas (`code-execution-…`) pass: they bill nothing without their
 * `tools` entry or a `container`, which messages-request.ts refuses.
 */
const OVERPRICED_BETA = /^fast-mode/i;
/**
 * The 1M-token context window (`context-1m-…`): a prompt past 200K tokens with it is billed at a
 * long-context premium on input and output, above the flat per-token price this node charges.
 */
const LONG_CONTEXT_BETA = /^context-1m/i;
/**
 * Betas letting the upstream serve another model than the routed one (server-side fallbacks:
 * `server-side-fallback-…`), refused like the `fallbacks` they enable (messages-request.ts).
 */
const OTHER_MODELS_BETA = /^server-side-fallback/i;

type Json = Record<string, unknown>;

function headerValue(ctx: PipelineContext, name: string): string | undefined {
  const value = ctx.http.headers[name];
  return Array.isArray(value) ? value.join(',') : value;
}

/** A header value without the optional whitespace (spaces, tabs) HTTP allows around it. */
function withoutOws(value: string): string {
  let start = 0;
  let end = value.length;
  while (start < end && (value[start] === ' ' || value[start] === '\t')) start++;
  while (end > start && (value[end - 1] === ' ' || value[end - 1] === '\t')) end--;
  return value.slice(start, end);
}

/**
 * The beta names of an `anthropic-beta` value, read as an HTTP list (RFC 9110 §5.6.1): optional
 * whitespace around each comma, empty elements (`a,,b`, `a,`, `,a`) ignored. Undefined when a
 * name is malformed or there are more than MAX_BETAS; none for an absent or empty header.
 */
function betaNames(value: string | undefined): string[] | undefined {
  if (value === undefined) return [];
  const names = value.split(',').map(withoutOws).filter((name) => name !== '');
  return names.length <= MAX_BETAS && names.every((name) => BETA_NAME.test(name)) ? names : undefined;
}

/** The Anthropic headers that go upstream, from the caller's; a malformed one is the caller's error. */
function anthropicHeaders(ctx: PipelineContext): Record<string, string> | ZenovaError {
  const version = headerValue(ctx, 'anthropic-version')?.trim();
  if (version !== undefined && version !== '' && !VERSION_PATTERN.test(version)) {
    return zenovaError('ZN_ERR_INVALID_REQUEST', 'Invalid request: the anthropic-version header must be a date like 2023-06-01.');
  }
  const headers: Record<string, string> = { 'anthropic-version': version || DEFAULT_ANTHROPIC_VERSION };
  const betas = betaNames(headerValue(ctx, 'anthropic-beta'));
  if (betas === undefined) {
    return zenovaError('ZN_ERR_INVALID_REQUEST', `Invalid request: the anthropic-beta header must be a comma-separated list of at most ${MAX_BETAS} beta names (letters, digits, ".", "_", "-").`);
  }
  if (betas.some((name) => OVERPRICED_BETA.test(name))) {
    return zenovaError('ZN_ERR_INVALID_REQUEST', 'Invalid request: anthropic-beta: no fast-mode betas: fast mode is billed above the price this node charges.');
  }
  if (betas.some((name) => LONG_CONTEXT_BETA.test(name))) {
    return zenovaError('ZN_ERR_INVALID_REQUEST', 'Invalid request: anthropic-beta: no context-1m betas: a prompt past 200K tokens with the 1M context window is billed above the price this node charges.');
  }
  if (betas.some((name) => OTHER_MODELS_BETA.test(name))) {
    return zenovaError('ZN_ERR_INVALID_REQUEST', 'Invalid request: anthropic-beta: no server-side-fallback betas: fallbacks serve other models than the alias, past the models this key may use and the price this node charges.');
  }
  // The list as one canonical value (the separator Node joins repeated header lines with); a
  // header that names no beta (`,`, blanks) is as if absent.
  if (betas.length > 0) headers['anthropic-beta'] = betas.join(', ');
  return headers;
}

/**
 * A JSON answer: the alias in `model`, its text as slots (the same blocks as a request's:
 * contentBlockSlots; tool calls' input deferred until output rules check it; a tool name or stop
 * sequence the caller did not choose: unchosenAnswerSlots), its usage recorded; an answer without
 * `usage` gets the node's metered counts in it, one whose `usage` lacks a valid `output_tokens` the
 * metered output count in that field, its other fields kept (filled-usage.ts).
 */
function jsonReply(ctx: PipelineContext, answer: Json, alias: string): UpstreamReply {
  if (typeof answer.model === 'string') answer.model = alias;
  const texts: TextSlot[] = [];
  answerContentSlots(answer, texts);
  otherAnswerKeySlots(answer, texts);
  unchosenAnswerSlots(answer, callerChosenStrings(ctx.forwardBody), texts);
  const usage = messageUsage(ctx, answer);
  if (usage !== null) ctx.upstreamUsage = usage;
  const given = answer.usage;
  if (isRecord(given) && tokenCount(given.output_tokens) !== undefined) return { kind: 'json', status: 200, headers: {}, body: answer, texts };
  // No usage (a compatible upstream), or one without a valid output count (`{}`, input counters
  // only, a string, a fraction: the SDKs read `output_tokens` all the same): the counts the node
  // meters it with (filled-usage.ts), worked out at delivery, after the output rules, from the texts
  // as they go out. A usage that came keeps its other fields as sent (the object itself, so its
  // integers past 2^53 go out as written); an `input_tokens` it left out is filled as for none.
  const asWritten = (): string => {
    const counts = meteredCounts(ctx, texts);
    if (!isRecord(given)) answer.usage = { input_tokens: counts.inputTokens, output_tokens: counts.outputTokens };
    else {
      given.output_tokens = counts.outputTokens;
      if (given.input_tokens === undefined) given.input_tokens = counts.inputTokens;
    }
    return stringifyAsWritten(answer);
  };
  return { kind: 'json', status: 200, headers: {}, body: answer, texts, asWritten };
}

/**
 * A JSON message's usage; null without a usage object. A count it does not validly give stays
 * undefined, for stage meter to estimate (never 0). Validly given cache writes are kept also when
 * the input is estimated (an invalid cache-read counter): their premium is still owed (stage meter
 * holds them to the estimate).
 */
function messageUsage(ctx: PipelineContext, answer: Json): UpstreamUsage | null {
  if (!isRecord(answer.usage)) return null;
  const inputTokens = anthropicInputTokens(answer.usage);
  const cacheWrites = anthropicCacheWrites(answer.usage, ctx.promptCacheTtl);
  return { inputTokens, outputTokens: tokenCount(answer.usage.output_tokens), partial: false, ...(cacheWrites === undefined ? {} : { cacheWrites }) };
}

/**
 * Failures read before a stream's first event: an error the upstream reported there is answered
 * with the status and type its own error type stands for (firstEventErrorAnswer), when it ends the plan.
 */
const firstEventErrors = new WeakSet<ZenovaError>();

async function attemptMessages(
  ctx: PipelineContext,
  headers: Record<string, string>,
  target: RuntimeTarget,
  signal: AbortSwitch,
  timeoutMs: number,
): Promise<AttemptResult> {
  const body = ctx.forwardBody ?? {};
  const alias = ctx.model ?? target.upstreamModel;
  const sentAt = ctx.clock.monotonic();
  const exchange = await sendToUpstream(
    ctx,
    target,
    {
      method: 'POST',
      path: '/messages',
      // Serialised per attempt: guardrails may have rewritten texts, and each target has its own model.
      body: withLongIntegersOf(ctx.http.bodyText, JSON.stringify({ ...body, model: target.upstreamModel })),
      accept: ctx.stream ? 'text/event-stream' : 'application/json',
      secretHeader: 'x-api-key',
      extraHeaders: headers,
    },
    signal,
    timeoutMs,
  );
  if (exchange.kind === 'failed') return exchange;
  const { response } = exchange;
  const upstream = target.upstream.name;

  if (!ctx.stream) {
    const read = await readBilledAnswer(response, upstream, signal, { asWritten: true });
    if ('failed' in read) return read.failed;
    const inBand = inBandFailure(read.answer, upstream, response.statusCode, target.upstream.apiKey);
    if (inBand !== undefined) return inBand;
    if (!isMessage(read.answer)) return notAnAnswer(upstream, response.statusCode, 'a message');
    return { kind: 'answered', reply: jsonReply(ctx, read.answer, alias) };
  }

  // A compressed stream would parse as no events ("ended the stream before message_stop"): named as the JSON path names it.
  refuseEncodedAnswer(response, upstream);
  const contentType = response.headers['content-type'];
  // A JSON error object is that error (retried, fallen back from); other JSON an upstream that ignored
  // stream:true (final; a whole answer is charged, with its usage: the upstream billed it).
  // Media types are case-insensitive (`Text/Event-Stream` is one).
  if (typeof contentType !== 'string' || !contentType.toLowerCase().includes('text/event-stream')) return notAnEventStream(response, upstream, signal, (answer) => (isMessage(answer) ? messageUsage(ctx, answer) : undefined), target.upstream.apiKey);
  const release = (): void => {
    // Stops the upstream transfer when the pipeline stopped pulling early (caller gone, failure).
    if (!response.body.readableEnded) response.body.destroy();
  };
  let events: AsyncIterable<StreamEvent>;
  try {
    events = await firstEventRead(anthropicStreamEvents(response.body, { ctx, upstream, upstreamKey: target.upstream.apiKey, alias, sentAt, signal, release, idle: sseIdleDeadline(response.body, upstream, timeoutMs) }));
  } catch (err) {
    // A failure before the first event is the attempt's: nothing reached the caller yet.
    if (signal.aborted || !isZenovaError(err)) throw err;
    const outcome = err.code === 'ZN_ERR_UPSTREAM_TIMEOUT' ? 'timeout' : err.code === 'ZN_ERR_UPSTREAM_UNAVAILABLE' ? 'connect' : 'error';
    firstEventErrors.add(err);
    // An in-band rate_limit_error is answered as a 429 when it ends the plan: with a Retry-After, as an HTTP 429 is.
    const retryAfter = firstEventErrorStatus(err) === 429 ? { retryAfterSeconds: upstreamRetryAfterSeconds(response.headers['retry-after']) } : {};
    return { kind: 'failed', error: err, outcome, httpStatus: null, retryable: err.retryable, ...retryAfter };
  }
  return {
    kind: 'answered',
    reply: {
      kind: 'stream',
      status: 200,
      headers: passedHeaders(response),
      events,
      textEvent: deltaEventLike,
      errorEvent: errorStreamEvent,
    },
  };
}

/** Whether a 2xx JSON body is a message (what `/v1/messages` answers), not something else. */
function isMessage(answer: Record<string, unknown>): boolean {
  return answer.type === 'message' || Array.isArray(answer.content);
}

export const messagesApi: ApiHandler = {
  api: 'messages',
  surface: 'model',

  identify(ctx: PipelineContext): StageResult {
    const valid = validateBody(messagesRequestSchema, ctx.body);
    if (!valid.ok) return valid.rejection;
    const fileId = fileIdParam(valid.value);
    if (fileId !== undefined) {
      return reject('ZN_ERR_FILE_ID_NOT_ALLOWED', `Invalid request: ${fileId}: files in the upstream provider's account are shared by every caller of this node, so a file_id is not passed on; send the file's content (base64, plain text or a URL) instead.`, { param: fileId });
    }
    const headers = anthropicHeaders(ctx);
    if (isZenovaError(headers)) return rejectWith(headers);
    // zod returns fresh objects: the slots below write into what is forwarded, not into ctx.body.
    const request: Json = valid.value;
    ctx.forwardBody = request;
    ctx.model = valid.value.model;
    ctx.stream = valid.value.stream === true;
    ctx.maxOutputTokens = valid.value.max_tokens;
    ctx.inputTexts = inputTextSlots(request);
    ctx.estimatedInputTokens = estimateInputTokens(ctx.inputTexts);
    const ttl = longestPromptCacheTtl(request);
    if (ttl !== undefined) ctx.promptCacheTtl = ttl;
    const billedAbovePrice = billedAbovePriceParam(request);
    if (billedAbovePrice !== undefined) ctx.billedAbovePrice = billedAbovePrice;
    return undefined;
  },

  route(ctx: PipelineContext): StageResult {
    return routeModel(ctx, 'anthropic');
  },

  async forward(ctx: PipelineContext): Promise<StageResult> {
    const headers = anthropicHeaders(ctx);
    if (isZenovaError(headers)) return rejectWith(headers);
    if (ctx.forwardBody === undefined) return reject('ZN_ERR_INTERNAL', 'The request was not identified.');
    const result = await forwardPlan(ctx, (target, signal, timeoutMs) => attemptMessages(ctx, headers, target, signal, timeoutMs));
    // Mapped only here, once it is the last word: through the plan the error itself goes on, which
    // target health knows as an in-band rate limit (no failure of the target).
    return result !== undefined && firstEventErrors.has(result.error) ? rejectWith(firstEventErrorAnswer(result.error)) : result;
  },

  errorBody: anthropicErrorBodyOf,
};
