// What the node learns about a request while serving it, for the one "request finished" log line
// (and, later, metering and the spool record).
import type { ErrorCode } from '../errors.js';

export interface RequestContext {
  /** Config id of the caller's API key; never the key. */
  keyId?: string;
  /** The alias the caller asked for. */
  model?: string;
  upstream?: string;
  stream?: boolean;
  usage?: Record<string, unknown>;
  errorCode?: ErrorCode;
}

declare module 'fastify' {
  interface FastifyRequest {
    zenova: RequestContext;
  }
}
