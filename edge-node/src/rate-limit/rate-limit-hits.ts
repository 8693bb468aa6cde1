/**
 * Which limit refused a request, and which requests were let through unlimited because the limit
 * store failed, for the metrics module's counters: the limiter notes them here instead of widening
 * PipelineContext (weak collections, so they go with the request).
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

const storeFailures = new WeakSet<PipelineContext>();

/** The limit store failed on this request's admit, so it runs without limits (fail open). */
export function noteRateLimitStoreFailure(ctx: PipelineContext): void {
  storeFailures.add(ctx);
}

export function rateLimitStoreFailedFor(ctx: PipelineContext): boolean {
  return storeFailures.has(ctx);
}
