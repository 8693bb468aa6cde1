/**
 * Forwarding with the route's rules (owner: pipeline-core; signature fixed for the providers):
 * try ctx.plan in order — the chosen weighted target, then the fallbacks — giving each target
 * `ctx.route.retries` extra attempts; a target failure that is a connect error, a timeout or a 5xx
 * moves on, anything else (a 4xx) is final. Attempts happen only while nothing was sent to the
 * caller (a provider returns its reply before streaming starts). Records ctx.attempts, ctx.served
 * and upstream timings; sets ctx.reply from the first answer. Stub until implemented.
 */
import type { UpstreamAttempt } from '../../../proto/src/index.js';
import type { RuntimeTarget } from '../config/runtime-config.js';
import type { ZenovaError } from '../errors.js';
import type { PipelineContext, UpstreamReply } from '../pipeline/context.js';
import { reject } from '../pipeline/stage.js';
import type { StageResult } from '../pipeline/stage.js';

export type AttemptResult =
  | { kind: 'answered'; reply: UpstreamReply }
  | {
      kind: 'failed';
      error: ZenovaError;
      outcome: Exclude<UpstreamAttempt['outcome'], 'ok'>;
      httpStatus: number | null;
      /** Whether another attempt (retry or fallback) may help: connect errors, timeouts, 5xx. */
      retryable: boolean;
    };

/**
 * One attempt at `target`: send the request (with the target's own model and the upstream secret)
 * and return the reply once its status and headers are in (streams not yet consumed). `signal`
 * aborts on the attempt's timeout or when the caller leaves.
 */
export type AttemptFn = (target: RuntimeTarget, signal: AbortSignal, timeoutMs: number) => Promise<AttemptResult>;

export async function forwardPlan(ctx: PipelineContext, attempt: AttemptFn): Promise<StageResult> {
  void ctx;
  void attempt;
  return reject('ZN_ERR_INTERNAL', 'forwardPlan is not implemented yet.');
}
