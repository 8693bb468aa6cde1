/**
 * Forwarding with the route's rules (signature fixed for the providers): try ctx.plan in order —
 * the targets in weighted order, then the fallbacks (route-model.ts planFor) — giving each target `ctx.route.retries` extra
 * attempts; a failure that is a connect error, a timeout or a 5xx moves on, a rate limit (a 429,
 * or one reported in band: isUpstreamStreamRateLimit), a refused node key or an upstream account out
 * of quota or credit (quotaExhausted) moves on to the next target, anything else (a 4xx) is final. Attempts happen only while nothing was sent to the caller: a provider's attempt returns
 * its reply once the status and headers are in (a JSON answer's once its body is read, its timer
 * stopped at the headers; a stream's once its first event is read, so a stream that breaks, stalls
 * or errs before it is a failed attempt), before any event reaches the caller, and nothing here
 * runs again after that. An answer that times out once the upstream had the whole request (its
 * headers late, a JSON body stalled, a stream's first event late) goes on to the next target, not
 * retried on that one: the upstream goes on with it and bills each retry (nextTargetOnly,
 * billedWithoutAnswer). An upstream 429 that is the plan's last word passes on
 * its Retry-After. Each attempt's result goes to target health (target-health.ts); a stream's
 * answering attempt's when the stream ends (noteStreamHealth). Records ctx.attempts, ctx.served (also for a
 * failure the upstream bills: upstreamBilled, billedWithoutAnswer; and for a caller that left once
 * the upstream had the whole request: attemptRequestSent) and upstream timings; sets ctx.reply from the first answer. A
 * caller that goes away stops everything (the runner records 'aborted').
 */
import type { UpstreamAttempt } from '../../../proto/src/index.js';
import type { RuntimeTarget } from '../config/runtime-config.js';
import { isZenovaError, zenovaError, ZenovaError } from '../errors.js';
import type { PipelineContext, UpstreamReply, UpstreamUsage } from '../pipeline/context.js';
import { reject, rejectWith } from '../pipeline/stage.js';
import type { StageResult } from '../pipeline/stage.js';
import { classifyUpstreamFailure, inBandQuotaExhaustion, isUpstreamStreamRateLimit, upstreamFailureCode } from '../upstream/upstream-failure.js';
import type { UpstreamQuotaError } from '../upstream/upstream-failure.js';
import { AbortSwitch } from '../pipeline/abort-switch.js';
import { isNodeStopping } from '../http/in-flight-requests.js';
import type { AttemptHealth } from './target-health.js';

export type AttemptResult =
  | { kind: 'answered'; reply: UpstreamReply }
  | {
      kind: 'failed';
      error: ZenovaError;
      outcome: Exclude<UpstreamAttempt['outcome'], 'ok'>;
      httpStatus: number | null;
      /** Whether another attempt (retry or fallback) may help: connect errors, timeouts, 5xx. */
      retryable: boolean;
      /** For an upstream 429: the seconds the caller should wait (sent as Retry-After if this failure is final). */
      retryAfterSeconds?: number;
      /**
       * The upstream answered and did the work (and bills it), but its answer cannot be used (an
       * answer past its bound, a whole JSON answer to a stream request): the target is recorded as
       * served, so the request is metered (`billedUsage`, else from the estimate) and charged. Only
       * on a final failure.
       */
      upstreamBilled?: true;
      /** With upstreamBilled: the usage the unused answer gave, metered as an answer's would be. */
      billedUsage?: UpstreamUsage;
      /**
       * Retryable, but not on the same target: it would answer the same way again, or bill again.
       * Either it did the work (and bills it: an answer compressed although identity was asked for,
       * or whose connection broke while its body was read), or it refused the node's credentials
       * (401, 403, 407). The plan goes on with the next target.
       */
      nextTargetOnly?: true;
      /**
       * The upstream said the node's account with it is out of quota or credit (quotaExhaustedAttempt):
       * `error` is the node's answer saying so. Like a refused node key, the plan goes on with the
       * next target only, and target health counts it a failure; nothing is charged.
       */
      quotaExhausted?: true;
      /**
       * The upstream bills this attempt though its answer never reached the caller: it timed out
       * after the upstream had the whole request (attemptRequestSent), which goes on with it, the
       * answer came compressed although identity was asked for, or its connection broke while its
       * 2xx body was read (attemptHeadersIn). The request is charged the
       * prompt (ctx.served names this target unless a later attempt answers) and its final failure
       * tells SDKs not to resend.
       */
      billedWithoutAnswer?: true;
    };

/**
 * One attempt at `target`: send the request (with the target's own model and the upstream secret)
 * and return the reply once its status and headers are in (a stream with only its first event
 * read; a JSON answer read whole). `signal` aborts on the attempt's timeout or when the caller
 * leaves; an attempt may simply throw what the abort (or the network) threw, forwardPlan classifies
 * it. The attempt's timer bounds connecting, the headers and a stream's first event; an attempt
 * that reads a JSON body ends it first (`attemptHeadersIn`), the body's gaps then being bounded by
 * the upstream call's between-chunk timeout (the same `timeoutMs`).
 */
export type AttemptFn = (target: RuntimeTarget, signal: AbortSwitch, timeoutMs: number) => Promise<AttemptResult>;

/**
 * An attempt's abort switch, which also holds the attempt's timer: aborted with
 * ZN_ERR_UPSTREAM_TIMEOUT when the timer fires first, or when the caller leaves.
 */
class AttemptSwitch extends AbortSwitch {
  timedOut = false;
  /** The request was written whole to the upstream's connection (attemptRequestSent). */
  requestSent = false;
  /** A 2xx JSON answer's status and headers are in and its body is being read (attemptHeadersIn). */
  headersIn = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly timeoutMs: number) {
    super();
    this.arm(timeoutMs);
  }

  /** The body of a JSON answer is read from now: the timer becomes the body's overall deadline. */
  bodyFollows(): void {
    this.headersIn = true;
    if (this.timer === undefined) return;
    clearTimeout(this.timer);
    this.arm(BODY_DEADLINE_FACTOR * this.timeoutMs);
  }

  private arm(ms: number): void {
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timedOut = true;
      this.abort(zenovaError('ZN_ERR_UPSTREAM_TIMEOUT'));
    }, ms);
  }

  stopTimer(): void {
    if (this.timer === undefined) return;
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/**
 * How many times the per-target timeout a JSON answer's body may take once its headers are in.
 * Some upstreams send the headers at once and keep the connection warm with whitespace until the
 * answer is ready, so the body is not held to `timeoutMs` (only each gap between its chunks is);
 * this bounds a body that trickles forever.
 */
export const BODY_DEADLINE_FACTOR = 10;

/**
 * Tells the attempt that owns `signal` that its answer's headers are in and its body is about to be
 * read whole (a JSON answer): the attempt's timer now allows the body BODY_DEADLINE_FACTOR ×
 * `timeoutMs` in all, so a body that keeps coming is not cut at `timeoutMs`; its gaps are bounded by
 * the upstream call's between-chunk timeout (undici's bodyTimeout, the same `timeoutMs`). Either
 * fails it as ZN_ERR_UPSTREAM_TIMEOUT. A no-op for a switch no attempt made. Streams do not call
 * it: their timer runs until the first event.
 */
export function attemptHeadersIn(signal: AbortSwitch): void {
  if (signal instanceof AttemptSwitch) signal.bodyFollows();
}

/**
 * Tells the attempt that owns `signal` that its request was written whole to the upstream's
 * connection: the upstream has the prompt and works on it (and bills it) whether or not its answer
 * is read, so a caller that leaves from now on is charged the prompt (attemptOnce). A no-op for a
 * switch no attempt made.
 */
export function attemptRequestSent(signal: AbortSwitch): void {
  if (signal instanceof AttemptSwitch) signal.requestSent = true;
}

/**
 * The record schema allows 64 attempts. A plan can ask for more (up to 32 targets and 32 fallbacks,
 * each with up to 6 tries): the attempts past 64 are not made, so the last fallbacks of such a plan
 * go untried (docs/api.md).
 */
const MAX_ATTEMPTS = 64;

/** The rejection returned once the caller has gone; the runner turns it into outcome 'aborted'. */
export const CALLER_GONE_MESSAGE = 'The caller went away before the upstream answered.';

export async function forwardPlan(ctx: PipelineContext, attempt: AttemptFn): Promise<StageResult> {
  const { route, plan } = ctx;
  if (route === undefined || plan === undefined || plan.length === 0) return reject('ZN_ERR_INTERNAL', 'The request has no route plan.');
  let lastFailure: ZenovaError | undefined;
  // The wait an upstream 429 asked for, passed on when that 429 is the plan's last word.
  let lastRetryAfter: number | undefined;
  // A target did (or goes on doing) the work but its answer never reached the caller
  // (billedWithoutAnswer): the final failure tells SDKs not to resend, or each of their retries
  // would be billed by that upstream (and charged) again.
  let workDone = false;
  const finalFailure = (): StageResult => {
    const error = lastFailure ?? zenovaError('ZN_ERR_UPSTREAM_UNAVAILABLE');
    if (lastRetryAfter !== undefined) ctx.responseHeaders['retry-after'] = String(lastRetryAfter);
    return rejectWith(workDone && error.retryable ? notRetryable(error) : error);
  };
  for (const target of plan) {
    const timeoutMs = Math.min(route.timeoutMs, target.upstream.timeoutMs);
    for (let tries = 0; tries <= route.retries; tries++) {
      if (ctx.callerGone.aborted) return callerGone();
      if (ctx.attempts.length >= MAX_ATTEMPTS) return finalFailure();
      const startedAt = ctx.clock.monotonic();
      const outcome = await attemptOnce(ctx, target, timeoutMs, attempt, startedAt);
      if (outcome === 'answered' && ctx.reply?.kind === 'stream') {
        // A stream is judged when it ends: noted reachable at its first event, a target that fails
        // every stream midway would have its failures cleared each time and never be ejected.
        ctx.cleanups.push(() => noteStreamHealth(ctx, target, startedAt));
        return undefined;
      }
      noteHealth(ctx, target, outcome, startedAt);
      if (outcome === 'answered') return undefined;
      if (outcome === 'caller-gone') return callerGone();
      lastFailure = outcome.error;
      lastRetryAfter = outcome.retryAfterSeconds;
      if (outcome.billedWithoutAnswer === true) workDone = true;
      if (!outcome.retryable) {
        if (outcome.retryAfterSeconds !== undefined) ctx.responseHeaders['retry-after'] = String(outcome.retryAfterSeconds);
        return rejectWith(outcome.error);
      }
      // A rate limit is the target's: another may answer now, while this one would refuse a retry
      // at once. The same rule for an HTTP 429 (nextTargetOnly) and for one the upstream reported
      // in band (a stream's first event, a 2xx error object), which before spent this target's retries.
      // An upstream account out of quota or credit (quotaExhausted) refuses every retry alike.
      if (outcome.nextTargetOnly === true || outcome.quotaExhausted === true || isUpstreamStreamRateLimit(outcome.error)) {
        break;
      }
    }
  }
  return finalFailure();
}

function notRetryable(error: ZenovaError): ZenovaError {
  return new ZenovaError(error.code, error.message, { status: error.status, type: error.type, retryable: false, param: error.param ?? undefined, logMessage: error.logMessage });
}

/**
 * Tells target health how the attempt went: an answer, or a final reply other than a 429 (the
 * upstream is there), is good; a connect error, timeout, 5xx, refused node key or upstream account
 * out of quota a failure; the caller leaving, a 429
 * (also one reported inside a stream) and an unreadable answer say nothing about the target. Logs and counts ejections and recoveries.
 */
function noteHealth(ctx: PipelineContext, target: RuntimeTarget, outcome: Awaited<ReturnType<typeof attemptOnce>>, startedAt: number): void {
  let health: AttemptHealth;
  if (outcome === 'answered') health = 'reachable';
  else if (outcome === 'caller-gone') health = 'neutral';
  // A rate limit (a 429, or one reported inside a stream) is tried elsewhere, but is no failure of
  // the target; an account out of quota (a 429 too, for OpenAI) is, as a refused node key is.
  else if (outcome.quotaExhausted === true) health = 'failed';
  else if (outcome.retryable) health = outcome.httpStatus === 429 || isUpstreamStreamRateLimit(outcome.error) ? 'neutral' : 'failed';
  else health = outcome.httpStatus !== null && outcome.httpStatus !== 429 ? 'reachable' : 'neutral';
  const change = ctx.deps.targetHealth.note(target, health, ctx.clock.monotonic(), startedAt);
  if (change === undefined) return;
  const fields = { upstream: target.upstream.name, model: target.upstreamModel };
  if (change === 'ejected') {
    ctx.deps.logger.warn({ ...fields, lastError: outcome === 'answered' || outcome === 'caller-gone' ? undefined : outcome.error.code }, 'upstream target keeps failing; it is tried last until it answers again');
  } else {
    ctx.deps.logger.info(fields, 'upstream target answers again; back in its place');
  }
  ctx.deps.metrics.upstreamTargetHealth?.(target.upstream.name, target.upstreamModel, change);
}

/**
 * How a stream went, for target health: delivered whole, stopped by the node (a guardrail) or by the
 * caller leaving, the target answered; an upstream failure after the first event
 * (ctx.upstreamStreamFailure) counts as that failure would before it (a stall, a reset: failed).
 */
function noteStreamHealth(ctx: PipelineContext, target: RuntimeTarget, startedAt: number): void {
  const failure = ctx.upstreamStreamFailure;
  if (failure === undefined) {
    noteHealth(ctx, target, 'answered', startedAt);
    return;
  }
  noteHealth(ctx, target, { kind: 'failed', error: failure, outcome: 'error', httpStatus: ctx.reply?.status ?? null, retryable: failure.retryable }, startedAt);
}

function callerGone(): StageResult {
  return reject('ZN_ERR_UPSTREAM_UNAVAILABLE', CALLER_GONE_MESSAGE);
}

async function attemptOnce(
  ctx: PipelineContext,
  target: RuntimeTarget,
  timeoutMs: number,
  attempt: AttemptFn,
  startedAt: number,
): Promise<'answered' | 'caller-gone' | Extract<AttemptResult, { kind: 'failed' }>> {
  // The attempt's own signal: aborted by its timeout (until the headers are in; a stream: until its
  // first event) or by the caller leaving (for as long as the reply is relayed, so a stream's
  // upstream body is cut too).
  const attemptAbort = new AttemptSwitch(timeoutMs);
  // Usage is the answering attempt's own: counts a failed earlier attempt read (a usage chunk
  // before its failure) must not be billed as this one's.
  ctx.upstreamUsage = null;
  // Its own AbortError, made only if undici asks for the reason (the caller's switch has none of its own).
  const onGone = (): void => attemptAbort.abort();
  ctx.callerGone.once('abort', onGone);
  let result: AttemptResult;
  try {
    result = await attempt(target, attemptAbort, timeoutMs);
  } catch (err) {
    result = failureOf(err, target, attemptAbort);
  } finally {
    attemptAbort.stopTimer();
  }
  result = inBandQuotaAttempt(result);
  const timedOut = attemptAbort.timedOut;
  const durationMs = ctx.clock.monotonic() - startedAt;
  const record = (outcome: UpstreamAttempt['outcome'], httpStatus: number | null): void => {
    ctx.attempts.push({ upstream: target.upstream.name, model: target.upstreamModel, outcome, httpStatus, durationMs: round(durationMs) });
  };

  if (result.kind === 'answered') {
    record('ok', result.reply.status);
    ctx.reply = result.reply;
    ctx.served = { upstream: target.upstream.name, model: target.upstreamModel };
    ctx.upstreamFirstByteMs = round(durationMs);
    // Final for JSON replies; a stream's provider moves it on when the stream ends.
    ctx.upstreamMs = round(durationMs);
    return 'answered';
  }
  ctx.callerGone.removeListener('abort', onGone);
  if (ctx.callerGone.aborted) {
    record('aborted', null);
    // The upstream had the whole request: it goes on generating (a JSON answer comes only once it
    // is done) and bills the prompt, so the caller who left is charged it (stage meter estimates
    // the input; no output was read). Not when the node's own stop cut the attempt: that caller is
    // answered 503 and may send again.
    if (attemptAbort.requestSent && !isNodeStopping(ctx.callerGone.reason)) {
      ctx.served = { upstream: target.upstream.name, model: target.upstreamModel };
      ctx.upstreamMs = round(durationMs);
    }
    return 'caller-gone';
  }
  // Usage read by an attempt that did not answer (a stream's usage chunk before its error) is not
  // the request's: a final failure meters none, and a charge without an answer is estimated.
  ctx.upstreamUsage = null;
  // An HTTP status the upstream answered with (a 503, a 429 whose error body then stalled): it
  // refused the work, and its status decides what happens next (a 400 is final, a 429 goes to the
  // next target with its Retry-After), not the timer that cut its error body short.
  const answeredStatus = result.httpStatus;
  if (timedOut && result.outcome !== 'timeout' && result.outcome !== 'status') {
    result = {
      kind: 'failed',
      error: zenovaError('ZN_ERR_UPSTREAM_TIMEOUT', `Upstream "${target.upstream.name}" did not answer within ${timeoutMs} ms.`),
      outcome: 'timeout',
      httpStatus: null,
      retryable: true,
    };
  }
  // The connection broke (reset, closed) while a 2xx JSON answer's body was read: the upstream
  // answers only once it is done, so it did the work and bills it. Not retried on this target (each
  // retry would be billed again, as the compressed answer below); another target may still answer.
  // A break before the headers stays a retryable connect error: nothing says the work was done.
  if (result.outcome === 'connect' && attemptAbort.headersIn) {
    result = { ...result, error: cutMidAnswer(result.error, target.upstream.name), nextTargetOnly: true };
  }
  // Likewise a 2xx JSON answer whose body stalled past its deadline: the upstream was done, and a
  // retry there would be billed again. And any answer late once the upstream had the whole request
  // (UND_ERR_HEADERS_TIMEOUT, or the attempt's timer first; JSON headers, a stream's headers or its
  // first event): it may only be slow, but it goes on generating and bills that, and each retry
  // there would be one more. A timeout before the request was sent whole (connecting) is still
  // retried there: nothing reached it.
  const lateOnceSent = result.outcome === 'timeout' && answeredStatus === null && attemptAbort.requestSent;
  if (result.outcome === 'timeout' && (attemptAbort.headersIn || lateOnceSent)) result = { ...result, nextTargetOnly: true };
  record(result.outcome, result.httpStatus);
  // A refused credential or a rate limit (an HTTP status, nextTargetOnly) did no work; an answer
  // compressed anyway (an error, nextTargetOnly) or cut while it was read (connect, nextTargetOnly)
  // did. A timeout once the upstream had the whole request: as for a caller who left (above), the
  // upstream goes on and bills the prompt.
  const didTheWork = result.nextTargetOnly === true && (result.outcome === 'error' || result.outcome === 'connect');
  if (lateOnceSent || didTheWork) {
    // Charged the prompt unless a later attempt answers (its usage then).
    result = { ...result, billedWithoutAnswer: true };
    ctx.served = { upstream: target.upstream.name, model: target.upstreamModel };
    ctx.upstreamMs = round(durationMs);
  }
  if (result.upstreamBilled === true) {
    ctx.served = { upstream: target.upstream.name, model: target.upstreamModel };
    // This attempt's own counts (reset above with any a failed attempt read).
    if (result.billedUsage !== undefined) ctx.upstreamUsage = result.billedUsage;
    ctx.upstreamFirstByteMs = round(durationMs);
    ctx.upstreamMs = round(durationMs);
  }
  return result;
}

/**
 * A failed attempt whose upstream said the node's account with it is out of quota or credit (an
 * OpenAI 429 insufficient_quota, any 402, in band too): the operator's problem, as a refused node
 * key is, not the caller's rate limit or request. `error` is the node's non-retryable 502 saying so
 * (no Retry-After, x-should-retry: false); retryable for the plan, which goes on with the next target
 * (forwardPlan; not nextTargetOnly, which for an in-band error would mean the upstream did the work
 * and bills it: it did none, so nothing is charged).
 */
export function quotaExhaustedAttempt(error: UpstreamQuotaError, outcome: Extract<AttemptResult, { kind: 'failed' }>['outcome'], httpStatus: number | null): Extract<AttemptResult, { kind: 'failed' }> {
  return { kind: 'failed', error, outcome, httpStatus, retryable: true, quotaExhausted: true };
}

/**
 * An attempt that failed on an error the upstream reported in band before anything reached the
 * caller (a stream's first event, as the providers return or throw it) and that says the node's
 * account is out of quota: answered as such (quotaExhaustedAttempt). Only here is it known that no
 * event was relayed; mid-stream the error keeps its own answer.
 */
function inBandQuotaAttempt(result: AttemptResult): AttemptResult {
  if (result.kind !== 'failed' || result.quotaExhausted === true) return result;
  const error = inBandQuotaExhaustion(result.error);
  return error === undefined ? result : quotaExhaustedAttempt(error, result.outcome, result.httpStatus);
}

/** What an attempt threw, as a failed attempt (aborts are sorted out by the caller). */
function failureOf(err: unknown, target: RuntimeTarget, signal: AbortSwitch): Extract<AttemptResult, { kind: 'failed' }> {
  if (signal.aborted) {
    return { kind: 'failed', error: zenovaError('ZN_ERR_UPSTREAM_TIMEOUT'), outcome: 'aborted', httpStatus: null, retryable: true };
  }
  const error = isZenovaError(err) ? err : classifyUpstreamFailure(err, target.upstream.name);
  switch (error.code) {
    case 'ZN_ERR_UPSTREAM_TIMEOUT':
      return { kind: 'failed', error, outcome: 'timeout', httpStatus: null, retryable: true };
    case 'ZN_ERR_UPSTREAM_UNAVAILABLE':
      return { kind: 'failed', error, outcome: 'connect', httpStatus: null, retryable: true };
    case 'ZN_ERR_UPSTREAM_ERROR':
      // Retryable when it says so (a compressed answer: refuseEncodedAnswer): nothing reached the
      // caller and another target may answer, but this one did the work and would send it the same way.
      return error.retryable
        ? { kind: 'failed', error, outcome: 'error', httpStatus: null, retryable: true, nextTargetOnly: true }
        : { kind: 'failed', error, outcome: 'error', httpStatus: null, retryable: false };
    default:
      return { kind: 'failed', error, outcome: 'error', httpStatus: null, retryable: false };
  }
}

/**
 * ZN_ERR_UPSTREAM_UNAVAILABLE for a connection that broke while the upstream sent its answer: says
 * so (not "could not be reached"), with the network's code. Retryable for the plan (another target
 * may answer); the final failure tells SDKs not to resend (billedWithoutAnswer).
 */
function cutMidAnswer(error: ZenovaError, upstream: string): ZenovaError {
  const code = upstreamFailureCode(error.cause);
  return zenovaError(
    'ZN_ERR_UPSTREAM_UNAVAILABLE',
    `Upstream "${upstream}" closed the connection while sending its answer${code === undefined ? '' : ` (${code})`}; it may have billed the request, so it is not retried.`,
    { cause: error.cause },
  );
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
