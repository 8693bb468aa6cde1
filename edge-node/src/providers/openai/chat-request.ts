// The minimal shape the node needs from a chat completion request, and the fields it refuses to
// pass on (`service_tier` above standard, `speed` other than standard, `store: true`,
// `web_search_options`, the router fields naming other models and `plugins` (refusedRouterFields),
// content parts naming an uploaded file by its `file_id` (fileIdRefusal, refused after the schema with
// its own code); audio and output limits of other names on priced requests, billedAbovePriceParam); every other field passes through to the upstream
// untouched (the upstream is the authority on the rest).
import { z } from 'zod';
import type { UpstreamKind } from '../../config/runtime-config.js';
import type { BilledAbovePrice, UncheckedParam } from '../../pipeline/context.js';
import { reject } from '../../pipeline/stage.js';
import type { Rejection } from '../../pipeline/stage.js';
import { formatIssuePath } from '../../zod-issues.js';
import { cappedArray } from '../capped-array.js';
import { isRecord } from '../text-slot.js';

/** The most choices (`n`) a chat request may ask for, as OpenAI allows. */
export const MAX_CHOICES = 128;
/** The most messages a chat request may hold, as for /v1/messages (messages-request.ts). */
export const MAX_CHAT_MESSAGES = 10_000;
/**
 * The `service_tier` values a caller may send: those OpenAI bills at the standard price or below.
 * `priority` and `scale` are billed above it, while the node charges only its own per-token price.
 */
export const ALLOWED_SERVICE_TIERS = ['auto', 'default', 'flex'] as const;
/**
 * `speed` other than standard ("fast" mode, on Anthropic's API and OpenAI-compatible routers alike)
 * is billed at several times the per-token price, while the node charges only its own.
 */
export const speedSchema = z
  .literal('standard', { error: 'only "standard": faster speeds are billed above the price this node charges' })
  .nullish();

/**
 * Fields naming models a router or proxy upstream serves instead of, or after, the one the node
 * routed to (OpenRouter's `models` and `route: "fallback"`, LiteLLM's `fallbacks`,
 * `context_window_fallbacks` and `content_policy_fallbacks`, some proxies' `fallback_models`): they
 * would reach models the key may not use, recorded and priced as the alias. Also OpenRouter's `plugins` (web search and others), billed per use on top of the tokens.
 * Refused on chat and embeddings alike; `null` passes.
 */
const OTHER_MODELS = 'not passed on: it names models the upstream would serve instead of the alias, past the models this key may use and the price this node charges';
export const refusedRouterFields = {
  models: z.null({ error: OTHER_MODELS }).optional(),
  route: z.null({ error: OTHER_MODELS }).optional(),
  fallbacks: z.null({ error: OTHER_MODELS }).optional(),
  fallback_models: z.null({ error: OTHER_MODELS }).optional(),
  context_window_fallbacks: z.null({ error: OTHER_MODELS }).optional(),
  content_policy_fallbacks: z.null({ error: OTHER_MODELS }).optional(),
  plugins: z.null({ error: 'not passed on: the upstream bills plugins (web search and others) per use on top of the tokens, above the price this node charges' }).optional(),
};

/** The most content parts a message may hold, as the blocks of an Anthropic message (messages-request.ts). */
const MAX_CONTENT_PARTS = 10_000;

/**
 * Where a content part names a file by a non-null `file_id`: a `file` part's `file.file_id`, or one
 * on the part itself or in any of its objects (`input_file`, an `image_url` of a server that takes
 * ids), as the path from the part; undefined when it names none.
 */
function fileIdPath(part: Record<string, unknown>): PropertyKey[] | undefined {
  if (part.file_id !== undefined && part.file_id !== null) return ['file_id'];
  for (const key of Object.keys(part)) {
    const value = part[key];
    if (isRecord(value) && value.file_id !== undefined && value.file_id !== null) return [key, 'file_id'];
  }
  return undefined;
}

/** The path of the first content part in `content` naming a file (fileIdPath), from `at`; undefined when none does. */
function contentFileIdPath(content: unknown, at: PropertyKey[]): PropertyKey[] | undefined {
  if (!Array.isArray(content)) return undefined;
  for (const [i, part] of content.entries()) {
    const path = isRecord(part) ? fileIdPath(part) : undefined;
    if (path !== undefined) return [...at, i, ...path];
  }
  return undefined;
}

/**
 * The refusal of a valid chat request whose messages or prediction hold a content part naming an
 * uploaded file by its `file_id` (fileIdPath), or undefined. The file is in the operator's upstream
 * account, which every caller of the node shares, so one caller's model could read another's upload:
 * ZN_ERR_FILE_ID_NOT_ALLOWED naming the field (`messages[1].content[0].file.file_id`), in the words
 * /v1/messages uses (messages.ts). Called by stage identify once the schema passed: validateBody
 * answers every schema issue as ZN_ERR_INVALID_REQUEST.
 */
export function fileIdRefusal(request: Record<string, unknown>): Rejection | undefined {
  let path: PropertyKey[] | undefined;
  const messages = request.messages;
  if (Array.isArray(messages)) {
    for (const [m, message] of messages.entries()) {
      path = isRecord(message) ? contentFileIdPath(message.content, ['messages', m, 'content']) : undefined;
      if (path !== undefined) break;
    }
  }
  if (path === undefined && isRecord(request.prediction)) path = contentFileIdPath(request.prediction.content, ['prediction', 'content']);
  if (path === undefined) return undefined;
  const param = formatIssuePath(path);
  return reject('ZN_ERR_FILE_ID_NOT_ALLOWED', `Invalid request: ${param}: files in the upstream provider's account are shared by every caller of this node, so a file_id is not passed on; send the file's content (file_data) instead.`, { param });
}

/**
 * A message's (or a prediction's) `content`: a string, parts, or null, as OpenAI takes it; not one
 * part object, nor parts nested in an array, nor a text or refusal part whose `text` / `refusal` is not a string (OpenAI refuses
 * both; guardrails would not read them as text). Other parts pass to the upstream (a part naming an
 * uploaded file by its `file_id` is refused after the schema: fileIdRefusal). Checked by hand
 * up to the first bad part, as cappedArray does (a union would report only the whole field).
 */
const messageContent = z.unknown().check((payload) => {
  const content = payload.value;
  if (content === undefined || content === null || typeof content === 'string') return;
  const issue = (message: string, path: PropertyKey[] = []): void => void payload.issues.push({ code: 'custom', message, path, input: content });
  if (!Array.isArray(content)) return issue('must be a string or an array of content parts');
  if (content.length > MAX_CONTENT_PARTS) return issue(`at most ${MAX_CONTENT_PARTS} content parts`);
  for (let i = 0; i < content.length; i++) {
    const part: unknown = content[i];
    if (Array.isArray(part)) return issue('a content part must be an object', [i]);
    if (typeof part !== 'object' || part === null) continue;
    const { type } = part as Record<string, unknown>;
    if ((type === 'text' || type === 'refusal') && typeof (part as Record<string, unknown>)[type] !== 'string') return issue(`a ${type} part needs a string "${type}"`, [i, type]);
  }
}).optional();

export const chatCompletionRequestSchema = z.looseObject({
  model: z.string().min(1).max(256),
  messages: cappedArray(z.looseObject({ role: z.string().min(1), content: messageContent }), { min: 1, max: MAX_CHAT_MESSAGES }),
  prediction: z.looseObject({ content: messageContent }).nullish(),
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
  speed: speedSchema,
  store: z.literal(false, { error: "only false: true would keep the conversation in the operator's upstream account" }).nullish(),
  web_search_options: z.null({ error: 'not passed on: the upstream bills each web search on top of the tokens, above the price this node charges' }).optional(),
  ...refusedRouterFields,
});

export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>;

/**
 * The output limit the node sends with a priced request (docs/billing.md, "Output limit"): the
 * per-choice allowance its credit reservation was made for, so the upstream cannot produce more than
 * was reserved, whichever field the caller used.
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

/**
 * The caller's per-choice output limit: the smaller of `max_completion_tokens` and `max_tokens`
 * when both are set, else the one that is; null when neither is. An upstream may read either field
 * (OpenAI the newer, Ollama's /v1 only `max_tokens`), so only the smaller is safe to reserve for and
 * upstreamChatBody sends both as it. Credit reservation and tokens/min admission count this one.
 */
export function callerOutputLimit(request: Record<string, unknown>): number | null {
  const completion = request.max_completion_tokens;
  const tokens = request.max_tokens;
  if (typeof completion === 'number') return typeof tokens === 'number' ? Math.min(completion, tokens) : completion;
  return typeof tokens === 'number' ? tokens : null;
}

/**
 * The body sent upstream: the upstream's model name, for streams `include_usage` forced on
 * (the node meters every stream) with the caller's other stream options kept, and the output limit.
 * A request carrying both limit fields gets both set to the smaller (callerOutputLimit), for every
 * request. A priced one (`limit`, the reserved per-choice output) otherwise goes with the limit in
 * the caller's own field to OpenAI, which reads both, and else in the field its upstream kind reads
 * (outputLimitField), not the other: a caller's lone
 * `max_completion_tokens` is not read by servers that take only `max_tokens` (Ollama's /v1, older
 * vLLM and llama.cpp), which would write without limit past the reservation.
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
  if (typeof request.max_tokens === 'number' && typeof request.max_completion_tokens === 'number') {
    const callerLimit = callerOutputLimit(request);
    body.max_tokens = callerLimit;
    body.max_completion_tokens = callerLimit;
  } else if (limit !== undefined) {
    // OpenAI reads both names, so a caller's own is kept (it knows which its model takes); other
    // kinds get the one they all read. The other name goes (an explicit null too): some servers
    // refuse both fields in one request.
    const own = typeof request.max_tokens === 'number' ? 'max_tokens' : typeof request.max_completion_tokens === 'number' ? 'max_completion_tokens' : undefined;
    delete body.max_tokens;
    delete body.max_completion_tokens;
    body[limit.kind === 'openai' && own !== undefined ? own : outputLimitField(limit.kind)] = limit.tokens;
  }
  return body;
}

/**
 * Output limits of other names that OpenAI-compatible servers honour in a chat request, and read
 * before (or instead of) `max_tokens`: llama.cpp's `n_predict`, TGI's and SGLang's `max_new_tokens`,
 * Ollama's `num_predict` (top level or in `options`). The node does not set them, so an upstream
 * reading one would write past the reserved limit: refused on priced requests (billedAbovePriceParam).
 */
const OTHER_OUTPUT_LIMITS = ['n_predict', 'max_new_tokens', 'num_predict'] as const;

/** Whether a chat request sets an output limit of another name (OTHER_OUTPUT_LIMITS), which an upstream may read instead of `max_tokens`. */
export function setsOtherOutputLimit(request: Record<string, unknown>): boolean {
  return OTHER_OUTPUT_LIMITS.some((field) => asks(request[field])) || (isRecord(request.options) && asks(request.options.num_predict));
}

/** Why another output limit field is refused on a priced request. */
const OTHER_OUTPUT_LIMIT = 'not passed on for a priced model: an output limit the node does not set, which the upstream may read instead of the limit credit was reserved for; use max_tokens or max_completion_tokens';

/** Whether the caller asked for the usage chunk itself; if not, the stream hides it again. */
export function callerWantsStreamUsage(request: Record<string, unknown>): boolean {
  const options = request.stream_options;
  return typeof options === 'object' && options !== null && (options as { include_usage?: unknown }).include_usage === true;
}

/**
 * A parameter asking for output that output guardrails cannot check, or undefined: log
 * probabilities (`logprobs` set to anything but false or null, or a `top_logprobs` other than 0 or
 * null: the answer's text again, token by token and with its alternatives, where a mask cannot
 * reach a match split across tokens) and audio (`modalities` naming it, or an `audio` parameter:
 * spoken words are not text). Any other value of them is taken as asking, since compatible servers
 * read them loosely.
 */
export function uncheckedOutputParam(request: Record<string, unknown>): UncheckedParam | undefined {
  if (asks(request.logprobs) && request.logprobs !== false) return { param: 'logprobs', what: 'log probabilities (the answer as tokens)' };
  if (asks(request.top_logprobs) && request.top_logprobs !== 0) return { param: 'top_logprobs', what: 'log probabilities (the answer as tokens)' };
  const modalities = request.modalities;
  if (asks(modalities) && !(Array.isArray(modalities) && modalities.every((modality) => modality === 'text'))) return { param: 'modalities', what: 'output other than text' };
  if (asks(request.audio)) return { param: 'audio', what: 'audio output' };
  return undefined;
}

/** Content parts carrying audio: OpenAI's `input_audio` (base64 data), vLLM's `audio_url` (a URL or a data URL). */
const AUDIO_PART_TYPES: ReadonlySet<string> = new Set(['input_audio', 'audio_url']);

/** Why audio is refused on a priced request (billedAbovePriceParam). */
const AUDIO_BILLED_ABOVE_PRICE = 'not passed on for a priced model: the upstream bills audio tokens above the price this node charges';

/**
 * Why `cache_control` (Anthropic prompt caching through OpenRouter, LiteLLM and other routers) is
 * refused on a priced chat request: the upstream bills the cache writes at 1.25× or 2× the input
 * price, which the node neither reserves nor reads back on this API (on /v1/messages it does).
 */
const CACHE_CONTROL_BILLED_ABOVE_PRICE = 'not passed on for a priced model on /v1/chat/completions: the upstream bills prompt-cache writes above the price this node charges; send prompt caching through /v1/messages, which prices it';

/** Why OpenRouter's `provider` routing preferences are refused on a priced request. */
const PROVIDER_BILLED_ABOVE_PRICE = 'not passed on for a priced model: provider routing picks among providers priced differently for the same model, past the price this node charges';

/**
 * A parameter a priced request may not carry, or undefined: an output limit of another name
 * (OTHER_OUTPUT_LIMITS), and audio, which OpenAI bills at several times the text price while the node
 * charges the model's one per-token price: audio output (`modalities` naming anything
 * but text, or an `audio` parameter, read as uncheckedOutputParam reads them) and audio parts
 * (AUDIO_PART_TYPES). Refused on priced requests only (stage preauthorise): an unpriced one bills nothing.
 */
export function billedAbovePriceParam(request: Record<string, unknown>): BilledAbovePrice | undefined {
  if (setsOtherOutputLimit(request)) {
    const field = OTHER_OUTPUT_LIMITS.find((name) => asks(request[name]));
    return { param: field ?? 'options.num_predict', reason: OTHER_OUTPUT_LIMIT };
  }
  const modalities = request.modalities;
  if (asks(modalities) && !(Array.isArray(modalities) && modalities.every((modality) => modality === 'text'))) return { param: 'modalities', reason: `only "text": ${AUDIO_BILLED_ABOVE_PRICE}` };
  if (asks(request.audio)) return { param: 'audio', reason: AUDIO_BILLED_ABOVE_PRICE };
  if (asks(request.provider)) return { param: 'provider', reason: PROVIDER_BILLED_ABOVE_PRICE };
  const messages = request.messages;
  if (!Array.isArray(messages)) return undefined;
  for (const [m, message] of messages.entries()) {
    if (isRecord(message) && asks(message.cache_control)) return { param: `messages[${m}].cache_control`, reason: CACHE_CONTROL_BILLED_ABOVE_PRICE };
    const content = isRecord(message) ? message.content : undefined;
    if (!Array.isArray(content)) continue;
    for (const [p, part] of content.entries()) {
      if (!isRecord(part)) continue;
      if (typeof part.type === 'string' && AUDIO_PART_TYPES.has(part.type)) return { param: `messages[${m}].content[${p}]`, reason: `no ${part.type} parts: ${AUDIO_BILLED_ABOVE_PRICE}` };
      if (asks(part.cache_control)) return { param: `messages[${m}].content[${p}].cache_control`, reason: CACHE_CONTROL_BILLED_ABOVE_PRICE };
    }
  }
  return undefined;
}

/** A parameter that is set: present and not null. */
function asks(value: unknown): boolean {
  return value !== undefined && value !== null;
}

/** The number of choices a validated chat request asks for (`n`, default 1). */
export function chatChoiceCount(request: Record<string, unknown> | undefined): number {
  const n = request?.n;
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 ? n : 1;
}
