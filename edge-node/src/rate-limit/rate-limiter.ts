/**
 * Rate limits as the pipeline sees them (owned by the rate-limit module): requests/min,
 * tokens/min and concurrency per key and per account, node-wide.
 */
import type { PipelineContext } from '../pipeline/context.js';
import type { Rejection } from '../pipeline/stage.js';

export interface RateLimiter {
  /**
   * Admits the request or returns the rejection (ZN_ERR_RATE_LIMITED / ZN_ERR_CONCURRENCY_LIMITED)
   * with Retry-After in ctx.responseHeaders. Sets x-ratelimit-* headers either way, and registers
   * in ctx.cleanups what must happen when the request ends (release the slot, count real tokens).
   */
  admit(ctx: PipelineContext): Rejection | undefined;
  close(): void;
}

/** No limits at all (tests that are not about limits). */
export const noRateLimits: RateLimiter = {
  admit: () => undefined,
  close: () => undefined,
};
