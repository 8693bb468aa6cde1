/**
 * What a request costs, in integer micro-units (docs/billing.md): its price from the request's
 * config snapshot, the worst case reserved before forwarding, and the actual cost from metered
 * usage. Products are computed in BigInt so no intermediate is ever rounded.
 */
import type { CacheWrites, PipelineContext } from '../pipeline/context.js';
import { billableCallCount } from '../providers/mcp/jsonrpc-message.js';
import { chatChoiceCount, setsOtherOutputLimit } from '../providers/openai/chat-request.js';

/** The rates that apply to one request (a model price, or a tool server's per-call fee: requestMicros per billable call, see feeCount). */
export interface RequestPrice {
  inputMicrosPerToken: number;
  outputMicrosPerToken: number;
  requestMicros: number;
}

/** The price of ctx's model (or tool server for MCP) in ctx's config; undefined when unpriced. */
export function priceOf(ctx: PipelineContext): RequestPrice | undefined {
  const config = ctx.config;
  if (config === undefined || ctx.model === null) return undefined;
  if (ctx.api === 'mcp') {
    const server = ctx.toolServer ?? config.toolServers.get(ctx.model);
    if (server === undefined) return undefined;
    return { inputMicrosPerToken: 0, outputMicrosPerToken: 0, requestMicros: server.callMicros };
  }
  if (ctx.api === 'models') return undefined;
  const price = config.prices.get(ctx.model);
  if (price === undefined) return undefined;
  return { inputMicrosPerToken: price.inputMicrosPerToken, outputMicrosPerToken: price.outputMicrosPerToken, requestMicros: price.requestMicros };
}

/** Whether the request is billed: it has an account (not a local key) and its model or tool server a price. */
export function isPriced(ctx: PipelineContext): boolean {
  return (ctx.key?.accountId ?? null) !== null && priceOf(ctx) !== undefined;
}

/**
 * What a prompt-cache write is billed on top of the input price, in quarters of it: Anthropic bills
 * a 5-minute write 1.25× and a 1-hour write 2× the input price.
 */
const CACHE_WRITE_PREMIUM_QUARTERS = { fiveMinute: 1n, oneHour: 4n };

/**
 * in × inRate + out × outRate + fees × fee, plus the premium of the input tokens written to the
 * prompt cache (counted in `inputTokens` already): ⌈(5-minute + 4 × 1-hour writes) × inRate / 4⌉,
 * rounded up so no fraction of a micro-unit is dropped. Undefined when the result is not a safe integer.
 */
export function costMicros(price: RequestPrice, inputTokens: number, outputTokens: number, fees = 1, cacheWrites?: CacheWrites): number | undefined {
  const inputRate = BigInt(price.inputMicrosPerToken);
  const premiumQuarters =
    cacheWrites === undefined
      ? 0n
      : (BigInt(cacheWrites.fiveMinuteTokens) * CACHE_WRITE_PREMIUM_QUARTERS.fiveMinute + BigInt(cacheWrites.oneHourTokens) * CACHE_WRITE_PREMIUM_QUARTERS.oneHour) * inputRate;
  const total =
    BigInt(inputTokens) * inputRate +
    (premiumQuarters + 3n) / 4n +
    BigInt(outputTokens) * BigInt(price.outputMicrosPerToken) +
    BigInt(fees) * BigInt(price.requestMicros);
  return total <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(total) : undefined;
}

/**
 * The most output tokens the request can produce: its per-choice max (max_tokens or equivalent, else
 * `perChoiceDefault`) for each choice it asks for, since every chat choice (`n`) is generated and
 * billed in full; 0 for APIs that generate none (embeddings, models, MCP). Both the credit
 * reservation and the tokens/min charge on admission use it.
 */
export function worstCaseOutputTokens(ctx: PipelineContext, perChoiceDefault: number): number {
  if (ctx.api !== 'chat.completions' && ctx.api !== 'messages') return 0;
  const perChoice = Math.max(0, Math.trunc(ctx.maxOutputTokens ?? perChoiceDefault));
  // Anthropic's Messages API has no `n`: one answer per request.
  const choices = ctx.api === 'chat.completions' ? chatChoiceCount(ctx.forwardBody) : 1;
  return Math.min(Number.MAX_SAFE_INTEGER, perChoice * choices);
}

/**
 * How many times the request's fee applies: once for a model request; for MCP, once per billable
 * call (`tools/call`, jsonrpc-message.ts BILLABLE_METHODS) the POSTed message or batch holds, so a
 * batch of 100 tool calls costs 100 × callMicros; GET and DELETE hold none. The method is part of the
 * envelope guardrails never rewrite, so the body as received tells it: the tool server gets the
 * caller's text only when it parses to this very body, else this body re-serialised (mcp-call.ts sentBody).
 */
export function feeCount(ctx: PipelineContext): number {
  if (ctx.api !== 'mcp') return 1;
  if (ctx.http?.method.toUpperCase() !== 'POST') return 0;
  return billableCallCount(ctx.body);
}

/**
 * The most the request can cost: estimated prompt tokens, plus its worst-case output
 * (worstCaseOutputTokens, with the policy default per choice), plus the fee (feeCount times). A
 * request that asks for prompt caching may have all its input written to the cache: the input is
 * reserved at the premium of the longest lifetime it asks for (2× for 1 hour, else 1.25×).
 */
export function worstCaseMicros(ctx: PipelineContext, price: RequestPrice, defaultMaxOutputTokens: number): number | undefined {
  const inputTokens = Math.max(0, Math.trunc(ctx.estimatedInputTokens));
  const ttl = ctx.promptCacheTtl;
  const cacheWrites = ttl === undefined ? undefined : { fiveMinuteTokens: ttl === '5m' ? inputTokens : 0, oneHourTokens: ttl === '1h' ? inputTokens : 0 };
  return costMicros(price, inputTokens, worstCaseOutputTokens(ctx, defaultMaxOutputTokens), feeCount(ctx), cacheWrites);
}

/**
 * Whether the request can cost anything at all, whatever the upstream reports: false only when every
 * rate that applies is zero (a model priced 0 for input, output and fee; an MCP POST with no
 * `tools/call`, a GET, a DELETE). A request that can cost something needs a standing lease even when
 * its worst case comes to 0: usage is the upstream's count, not the node's estimate.
 */
export function canCostAnything(ctx: PipelineContext, price: RequestPrice): boolean {
  return price.inputMicrosPerToken > 0 || price.outputMicrosPerToken > 0 || (price.requestMicros > 0 && feeCount(ctx) > 0);
}

/**
 * What the request actually costs: metered usage at the price when an upstream answered (ok, a
 * stream that failed after answering, or an abort with partial usage; MCP: also a call the tool
 * server received but whose answer never came), 0 when none did (an upstream's 4xx included).
 */
export function actualCostMicros(ctx: PipelineContext, price: RequestPrice): number {
  if (ctx.served === undefined) return 0;
  const cost = costMicros(price, ctx.usage.inputTokens, ctx.usage.outputTokens, feeCount(ctx), ctx.usage.cacheWrites);
  // Usage beyond 2^53 micro-units cannot come from a real call; charge the most a record can carry.
  return cost ?? Number.MAX_SAFE_INTEGER;
}

/** Per-choice output limits the node must forward (see reservedOutputLimit). */
const reservedOutputLimits = new WeakMap<PipelineContext, number>();

/**
 * Called by pre-authorisation when it reserved output for a chat request: the allowance reserved per
 * choice (the caller's limit, else the default), which the provider then sends upstream
 * (chat-request.ts upstreamChatBody), so the worst case reserved is enforced, not hoped for.
 */
export function enforceOutputLimit(ctx: PipelineContext, perChoiceTokens: number): void {
  reservedOutputLimits.set(ctx, perChoiceTokens);
}

/**
 * The per-choice output limit to send with the forwarded request; undefined when the request is
 * unpriced (nothing reserved, nothing to protect: the caller's limit goes as sent).
 */
export function reservedOutputLimit(ctx: PipelineContext): number | undefined {
  return reservedOutputLimits.get(ctx);
}

/**
 * The most output the upstream was told it may write, in all (docs/billing.md, "Output limit"): on
 * chat the per-choice limit forwarded (the reserved one on a priced request, else the caller's own)
 * times the choices; on Messages the caller's `max_tokens` (required, forwarded as sent); undefined
 * when no limit went upstream (an unpriced chat request without one) or the API writes no output.
 * Stage meter caps an output *estimate* at it: the estimate (~4 characters per token) runs high
 * on text of long tokens, while an upstream that obeys the limit bills at most this.
 */
export function enforcedOutputTokens(ctx: PipelineContext): number | undefined {
  if (ctx.api === 'messages') return ctx.maxOutputTokens ?? undefined;
  if (ctx.api !== 'chat.completions') return undefined;
  const reserved = reservedOutputLimit(ctx);
  // An unpriced request may carry another limit field (`num_predict`, …) that some servers read
  // before `max_tokens`: the upstream may then write past it, so no cap is known.
  if (reserved === undefined && ctx.forwardBody !== undefined && setsOtherOutputLimit(ctx.forwardBody)) return undefined;
  const perChoice = reserved ?? ctx.maxOutputTokens;
  if (perChoice === null) return undefined;
  return Math.min(Number.MAX_SAFE_INTEGER, Math.max(0, Math.trunc(perChoice)) * chatChoiceCount(ctx.forwardBody));
}
