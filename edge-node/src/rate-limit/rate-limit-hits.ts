/**
 * Which limit refused a request, for the metrics module's rejection counter: the limiter notes it
 * here instead of widening PipelineContext (a WeakMap, so it goes with the request).
 */
import type { PipelineContext } from '../pipeline/context.js';

export type LimitScope = 'key' | 'account';
export type LimitKind = 'requests' | 'tokens' | 'concurrency';

export interface RateLimitHit {
  scope: LimitScope;
  limit: LimitKind;
}

const hits = new WeakMap<PipelineContext, RateLimitHit>();

export function noteRateLimitHit(ctx: PipelineContext, hit: RateLimitHit): void {
  hits.set(ctx, hit);
}

export function rateLimitHitOf(ctx: PipelineContext): RateLimitHit | undefined {
  return hits.get(ctx);
}
