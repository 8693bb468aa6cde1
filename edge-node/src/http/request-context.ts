// What the node learns about a request while serving it, for the one "request finished" log line
// (and, later, metering and the spool record), plus the config snapshot the request is served on.
import type { ConfigSnapshot } from '../config/config-holder.js';
import type { RuntimeConfig } from '../config/runtime-config.js';
import { zenovaError } from '../errors.js';
import type { ErrorCode } from '../errors.js';
import type { AbortSwitch } from '../pipeline/abort-switch.js';
import type { InFlightRequests } from './in-flight-requests.js';

export interface RequestContext {
  /** The caller's own id for the request (x-client-request-id or x-request-id), when it sent one. */
  clientRequestId?: string;
  /** Config id of the caller's API key; never the key. */
  keyId?: string;
  accountId?: string;
  /** The bundle version the request was served on. */
  configVersion?: number;
  /** The alias the caller asked for. */
  model?: string;
  upstream?: string;
  stream?: boolean;
  usage?: Record<string, unknown>;
  errorCode?: ErrorCode;
  /** Set when the request did not end 'ok' (rejected, failed, aborted). */
  outcome?: string;
  /** Why the node closed the connection before the answer was all sent, when it did. */
  closedByNode?: 'caller stopped reading' | 'malformed pipelined request';
}

declare module 'fastify' {
  interface FastifyRequest {
    zenova: RequestContext;
    /** Taken once when the request arrives; a config swap never changes it (config-holder.ts). */
    configSnapshot: ConfigSnapshot;
    /**
     * Set by the pipeline; the app aborts it when the caller leaves before the answer ended, and
     * the node's stop with ZN_ERR_NODE_STOPPING as its reason (in-flight-requests.ts).
     */
    callerGone: AbortSwitch | null;
  }
  interface FastifyInstance {
    /** The requests being served, for serve's stop (drain, then end those still running). */
    inFlight: InFlightRequests;
  }
}

/** The request's config; ZN_ERR_NODE_NOT_READY (503) when the node had none when it arrived. */
export function requestConfig(request: { configSnapshot: ConfigSnapshot; zenova: RequestContext }): RuntimeConfig {
  const snapshot = request.configSnapshot;
  if (!snapshot.ready) throw zenovaError('ZN_ERR_NODE_NOT_READY');
  if (snapshot.config.version !== null) request.zenova.configVersion = snapshot.config.version;
  return snapshot.config;
}
