/**
 * What a request costs, in integer micro-units (docs/billing.md): its price from the request's
 * config snapshot, the worst case reserved before forwarding, and the actual cost from metered
 * usage. Products are computed in BigInt so no intermediate is ever rounded.
 */
import type { PipelineContext } from '../pipeline/context.js';
import { chatChoiceCount } from '../providers/openai/chat-request.js';

/** The rates that apply to one request (a model price, or a tool server's per-call fee). */
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

/** in × inRate + out × outRate + fee; undefined when the result is not a safe integer. */
export function costMicros(price: RequestPrice, inputTokens: number, outputTokens: number): number | undefined {
  const total =
    BigInt(inputTokens) * BigInt(price.inputMicrosPerToken) +
    BigInt(outputTokens) * BigInt(price.outputMicrosPerToken) +
    BigInt(price.requestMicros);
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
 * The most the request can cost: estimated prompt tokens, plus its worst-case output
 * (worstCaseOutputTokens, with the policy default per choice), plus the per-request fee.
 */
export function worstCaseMicros(ctx: PipelineContext, price: RequestPrice, defaultMaxOutputTokens: number): number | undefined {
  return costMicros(price, Math.max(0, Math.trunc(ctx.estimatedInputTokens)), worstCaseOutputTokens(ctx, defaultMaxOutputTokens));
}

/**
 * What the request actually costs: metered usage at the price when an upstream answered (ok, a
 * stream that failed after answering, or an abort with partial usage), 0 when none did.
 */
export function actualCostMicros(ctx: PipelineContext, price: RequestPrice): number {
  if (ctx.served === undefined) return 0;
  const cost = costMicros(price, ctx.usage.inputTokens, ctx.usage.outputTokens);
  // Usage beyond 2^53 micro-units cannot come from a real call; charge the most a record can carry.
  return cost ?? Number.MAX_SAFE_INTEGER;
}
