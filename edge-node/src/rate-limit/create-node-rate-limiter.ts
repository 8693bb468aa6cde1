// The node's rate limiter (owner: rate-limit module). Stub: no limits yet.
import type { Logger } from '../logger.js';
import { noRateLimits } from './rate-limiter.js';
import type { RateLimiter } from './rate-limiter.js';

export interface NodeRateLimiterOptions {
  /** Where replicas share their counters; undefined in stand-alone mode (in-process counters). */
  stateDir: string | undefined;
  logger: Logger;
  env: NodeJS.ProcessEnv;
}

export async function createNodeRateLimiter(opts: NodeRateLimiterOptions): Promise<RateLimiter> {
  void opts;
  return noRateLimits;
}
