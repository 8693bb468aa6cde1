/**
 * What a request costs, in integer micro-units (docs/billing.md): its price from the request's
 * config snapshot, the worst case reserved before forwarding, and the actual cost from metered
 * usage. Products are computed in BigInt so no intermediate is ever rounded.
 */
import type { PipelineContext } from '../pipeline/context.js';

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
 * The most the request can cost: estimated prompt tokens, plus max_tokens (or the policy default
 * when absent; none for embeddings, which produce no output tokens), plus the per-request fee.
 */
export function worstCaseMicros(ctx: PipelineContext, price: RequestPrice, defaultMaxOutputTokens: number): number | undefined {
  const output = ctx.api === 'embeddings' || ctx.api === 'mcp' ? 0 : ctx.maxOutputTokens ?? defaultMaxOutputTokens;
  return costMicros(price, Math.max(0, Math.trunc(ctx.estimatedInputTokens)), Math.max(0, Math.trunc(output)));
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
