// The minimal shape the node needs from a chat completion request, and the two fields it refuses
// to pass on (`service_tier` above standard, `store: true`); every other field passes through to
// the upstream untouched (the upstream is the authority on the rest).
import { z } from 'zod';
import type { UpstreamKind } from '../../config/runtime-config.js';
import { cappedArray } from '../capped-array.js';

/** The most choices (`n`) a chat request may ask for, as OpenAI allows. */
export const MAX_CHOICES = 128;
/** The most messages a chat request may hold, as for /v1/messages (messages-request.ts). */
export const MAX_CHAT_MESSAGES = 10_000;
/**
 * The `service_tier` values a caller may send: those OpenAI bills at the standard price or below.
 * `priority` and `scale` are billed above it, while the node charges only its own per-token price.
 */
export const ALLOWED_SERVICE_TIERS = ['auto', 'default', 'flex'] as const;

export const chatCompletionRequestSchema = z.looseObject({
  model: z.string().min(1).max(256),
  messages: cappedArray(z.looseObject({ role: z.string().min(1) }), { min: 1, max: MAX_CHAT_MESSAGES }),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().nullish() }).nullish(),
  max_tokens: z.int().min(1).nullish(),
  max_completion_tokens: z.int().min(1).nullish(),
  // OpenAI's own bound. Each choice is generated (and billed) in full, so n multiplies the worst
  // case the node reserves credit and tokens/min for (billing/request-cost.ts): it must be bounded.
  n: z.int().min(1).max(MAX_CHOICES).nullish(),
  // Refused rather than passed through: each would act for the operator's upstream account.
  service_tier: z
    .enum(ALLOWED_SERVICE_TIERS, { error: `must be one of ${ALLOWED_SERVICE_TIERS.map((tier) => JSON.stringify(tier)).join(', ')}: other tiers are billed above the price this node charges` })
    .nullish(),
  store: z.literal(false, { error: "only false: true would keep the conversation in the operator's upstream account" }).nullish(),
});

export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>;

/**
 * An output limit the node adds to a request whose caller set none (docs/billing.md, "Output
 * limit"): the per-choice allowance its credit reservation was made for, so the upstream cannot
 * produce more than was reserved.
 */
export interface ForwardedOutputLimit {
  /** Output tokens per choice. */
  tokens: number;
  /** The upstream's kind: it decides the field (outputLimitField). */
  kind: UpstreamKind;
}

/**
 * The field an output limit is sent in, per upstream kind: OpenAI's own API takes
 * `max_completion_tokens` (its reasoning models refuse `max_tokens`); OpenAI-compatible servers
 * (vLLM, llama.cpp, Ollama, LiteLLM…) all accept `max_tokens`, not all the newer name.
 */
export function outputLimitField(kind: UpstreamKind): 'max_tokens' | 'max_completion_tokens' {
  return kind === 'openai' ? 'max_completion_tokens' : 'max_tokens';
}

/** Whether the caller set an output limit itself (`max_completion_tokens` or `max_tokens`, not null). */
export function callerSetOutputLimit(request: Record<string, unknown>): boolean {
  return (request.max_completion_tokens ?? null) !== null || (request.max_tokens ?? null) !== null;
}

/**
 * The body sent upstream: the upstream's model name, for streams `include_usage` forced on
 * (the node meters every stream) with the caller's other stream options kept, and `limit` (the
 * reserved per-choice output) when the caller set no output limit; a caller's own limit is never
 * changed.
 */
export function upstreamChatBody(
  request: Record<string, unknown>,
  upstreamModel: string,
  stream: boolean,
  limit?: ForwardedOutputLimit,
): Record<string, unknown> {
  const body: Record<string, unknown> = { ...request, model: upstreamModel };
  if (stream) {
    const options = request.stream_options;
    body.stream_options = { ...(typeof options === 'object' && options !== null ? options : {}), include_usage: true };
  }
  if (limit !== undefined && !callerSetOutputLimit(request)) {
    // An explicit null of either name goes: some servers refuse both fields in one request.
    delete body.max_tokens;
    delete body.max_completion_tokens;
    body[outputLimitField(limit.kind)] = limit.tokens;
  }
  return body;
}

/** Whether the caller asked for the usage chunk itself; if not, the stream hides it again. */
export function callerWantsStreamUsage(request: Record<string, unknown>): boolean {
  const options = request.stream_options;
  return typeof options === 'object' && options !== null && (options as { include_usage?: unknown }).include_usage === true;
}

/** The number of choices a validated chat request asks for (`n`, default 1). */
export function chatChoiceCount(request: Record<string, unknown> | undefined): number {
  const n = request?.n;
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 ? n : 1;
}
