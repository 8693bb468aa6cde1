/**
 * A fresh PipelineContext: what the request brings, and every field a stage sets at its starting
 * value. The runner makes one per request; tests make one per case (and set what their stage reads).
 */
import type { RuntimeConfig } from '../config/runtime-config.js';
import type { Clock } from './clock.js';
import type { ApiKind, PipelineContext, Surface } from './context.js';
import type { PipelineDeps } from './deps.js';
import type { AbortSwitch } from './abort-switch.js';

export interface ContextInit {
  requestId: string;
  /** The caller's own id for the request; absent when it sent none. */
  clientRequestId?: string;
  api: ApiKind;
  surface: Surface;
  http: PipelineContext['http'];
  body: unknown;
  deps: PipelineDeps;
  clock: Clock;
  callerGone: AbortSwitch;
  /** The request's config snapshot; absent when the node had none (identify refuses the request). */
  config?: RuntimeConfig;
}

export function newPipelineContext(init: ContextInit): PipelineContext {
  // One literal with every field in a fixed order (no spreads): every context gets the same hidden
  // class, and none of the intermediate objects the spreads made (they were ≈ 10% of the node's
  // allocation per request).
  return {
    requestId: init.requestId,
    clientRequestId: init.clientRequestId ?? null,
    api: init.api,
    surface: init.surface,
    http: init.http,
    body: init.body,
    deps: init.deps,
    clock: init.clock,
    callerGone: init.callerGone,
    config: init.config,
    receivedAt: init.clock.now(),
    startedAt: init.clock.monotonic(),
    model: null,
    stream: false,
    maxOutputTokens: null,
    estimatedInputTokens: 0,
    inputTexts: [],
    attempts: [],
    upstreamUsage: null,
    upstreamFirstByteMs: null,
    upstreamMs: null,
    responseText: '',
    responseTextChars: 0,
    responseTextDenseWeight: 0,
    guardedTextChars: 0,
    guardedTextDenseWeight: 0,
    deliveredInputTokens: 0,
    guardrails: [],
    usage: { inputTokens: 0, outputTokens: 0, estimated: false },
    cost: { reservedMicros: 0, costMicros: 0, leaseId: null, priced: false },
    openRowDurable: null,
    responseHeaders: {},
    stagesUs: {},
    outcome: { status: 'ok', httpStatus: 200, errorCode: null },
    replyHeadSent: false,
    cleanups: [],
    releaseSlot: null,
  };
}
