/**
 * One attempt's HTTP exchange with an upstream, shared by the providers: send the call through the
 * pool with the upstream's secret, and turn a non-2xx answer into a failed attempt (5xx may be
 * retried or fall back; a 429, a refused node key and an upstream account out of quota or credit
 * (quotaExhaustedAttempt: answered as the operator's problem) go on to the next target; other 4xx
 * are final), as a 2xx JSON answer that is an error object (inBandFailure).
 * Aborts and network errors are thrown for forwardPlan to sort.
 */
import type { RuntimeTarget } from '../config/runtime-config.js';
import { zenovaError } from '../errors.js';
import type { PipelineContext, UpstreamUsage } from '../pipeline/context.js';
import { attemptHeadersIn, attemptRequestSent, quotaExhaustedAttempt } from '../routing/forward-plan.js';
import type { AttemptResult } from '../routing/forward-plan.js';
import { isBodyTooLarge, parseJsonOrUndefined, readBodyBounded } from '../upstream/read-body.js';
import {
  classifyUpstreamFailure,
  isNodeCredentialStatus,
  unaskedEncodingError,
  upstreamAnswerError,
  upstreamQuotaError,
  upstreamRetryAfterSeconds,
  upstreamStatusError,
} from '../upstream/upstream-failure.js';
import type { UpstreamCall, UpstreamResponse } from '../upstream/upstream-pool.js';
import type { AbortSwitch } from '../pipeline/abort-switch.js';
import { parseAsWritten } from './json-string-slots.js';

/**
 * Ceiling for a non-streaming upstream answer held in memory (and for one event of a stream: sse.ts),
 * unless the API sizes its own from the request (embeddings: embeddingsAnswerBound).
 */
export const MAX_UPSTREAM_JSON_BYTES = 32 * 1024 * 1024;
/** Error bodies are read only for their code. */
const MAX_UPSTREAM_ERROR_BYTES = 64 * 1024;

export type FailedAttempt = Extract<AttemptResult, { kind: 'failed' }>;

export type UpstreamExchange = { kind: 'response'; response: UpstreamResponse } | FailedAttempt;

export async function sendToUpstream(
  ctx: PipelineContext,
  target: RuntimeTarget,
  call: Omit<UpstreamCall, 'requestId' | 'timeoutMs' | 'signal' | 'onSent'>,
  signal: AbortSwitch,
  timeoutMs: number,
): Promise<UpstreamExchange> {
  const response = await ctx.deps.upstreams.request(target.upstream, { ...call, requestId: ctx.requestId, timeoutMs, signal, onSent: () => attemptRequestSent(signal) });
  const status = response.statusCode;
  if (status >= 200 && status < 300) return { kind: 'response', response };
  const errorBody = await readBodyBounded(response.body, MAX_UPSTREAM_ERROR_BYTES, target.upstream.name).then(parseJsonOrUndefined, () => undefined);
  // Before the status's own rules: OpenAI's insufficient_quota comes as a 429 that is no rate limit.
  const quotaError = upstreamQuotaError(target.upstream.name, status, errorBody, target.upstream.apiKey);
  if (quotaError !== undefined) return quotaExhaustedAttempt(quotaError, 'status', status);
  // The node's key for this upstream refused (revoked, wrong, no access to the model): the
  // caller's request is not at fault and another target may hold a good key, but this one would
  // refuse every retry the same way.
  const credentialRefused = isNodeCredentialStatus(status);
  // A rate limit (429) is this target's, not the request's: another target may answer now, while
  // trying this one again at once would only be refused again.
  // A redirect (an http:// base URL sent on to https://, a moved API): the operator's setup of
  // this target, as a refused key is; the node follows none (the request and its key would go
  // where the config never named), so the plan goes on and the target counts it a failure.
  const redirected = status >= 300 && status < 400;
  const nextTargetOnly = credentialRefused || redirected || status === 429;
  return {
    kind: 'failed',
    error: upstreamStatusError(target.upstream.name, status, errorBody, target.upstream.apiKey),
    outcome: 'status',
    httpStatus: status,
    // 408: the upstream's own timeout waiting for the request, so it did no work: like a timeout.
    retryable: status >= 500 || status === 408 || nextTargetOnly,
    ...(nextTargetOnly ? { nextTargetOnly: true as const } : {}),
    ...(status === 429 ? { retryAfterSeconds: upstreamRetryAfterSeconds(response.headers['retry-after']) } : {}),
  };
}

/**
 * Throws unaskedEncodingError's ZN_ERR_UPSTREAM_ERROR for a compressed answer, JSON or stream,
 * before any of it is parsed; its body is read off and dropped (a bare destroy() would raise an
 * 'error' nobody listens to). Thrown, the attempt fails as any read failure does (forwardPlan):
 * retryable, so the route's fallbacks apply (not its retries: forwardPlan goes on to the next target,
 * this one did the work) and target health counts it a failure.
 */
export function refuseEncodedAnswer(response: UpstreamResponse, upstream: string): void {
  const error = unaskedEncodingError(upstream, response.headers['content-encoding'], true);
  if (error === undefined) return;
  void response.body.dump().catch(() => undefined);
  throw error;
}

export interface AnswerReading {
  /** The most bytes read (MAX_UPSTREAM_JSON_BYTES unless given). */
  maxBytes?: number;
  /**
   * Parsed with parseAsWritten: an integer past 2^53 (an id, a tool input's number) is held as its
   * digits and goes to the caller as written (stringifyAsWritten, run-pipeline.ts), not rounded.
   * For answers relayed whole (chat, messages); embeddings' long float lists need no such scan.
   */
  asWritten?: boolean;
}

/** parseJsonOrUndefined, but with integers past 2^53 kept as written (parseAsWritten). */
function parseAnswerAsWritten(bytes: Buffer): unknown {
  try {
    const bom = bytes.length >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf;
    return parseAsWritten((bom ? bytes.subarray(3) : bytes).toString('utf8')).value;
  } catch {
    return undefined;
  }
}

/**
 * A JSON object answer read whole, at most `maxBytes` (past it ZN_ERR_UPSTREAM_ERROR, which
 * isBodyTooLarge tells apart); a body that is not a JSON object (a compressed one
 * included: the node asks for `identity`) is ZN_ERR_UPSTREAM_ERROR. Read errors surface classified
 * (connect/timeout) unless aborted. The attempt's timer (headers) becomes the body's overall
 * deadline here (BODY_DEADLINE_FACTOR × `timeoutMs`, forward-plan.ts); each gap between its chunks
 * is bounded by the call's `timeoutMs` (undici's bodyTimeout). Both are ZN_ERR_UPSTREAM_TIMEOUT; the
 * caller leaving still aborts it.
 */
export async function readJsonObject(
  response: UpstreamResponse,
  upstream: string,
  signal: AbortSwitch,
  { maxBytes = MAX_UPSTREAM_JSON_BYTES, asWritten = false }: AnswerReading = {},
): Promise<Record<string, unknown>> {
  attemptHeadersIn(signal);
  refuseEncodedAnswer(response, upstream);
  let bytes: Buffer;
  try {
    bytes = await readBodyBounded(response.body, maxBytes, upstream);
  } catch (err) {
    if (signal.aborted) throw err;
    throw classifyUpstreamFailure(err, upstream);
  }
  const answer = asWritten ? parseAnswerAsWritten(bytes) : parseJsonOrUndefined(bytes);
  if (typeof answer !== 'object' || answer === null || Array.isArray(answer)) {
    throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `Upstream "${upstream}" answered with a body that is not a JSON object.`);
  }
  return answer as Record<string, unknown>;
}

/**
 * readJsonObject for a model's answer, except that an answer past its bound is a final failed
 * attempt the upstream bills (`upstreamBilled`): it did the work, so the request is charged from
 * its estimate (stage meter: the input estimated, no output read) rather than nothing, and it is
 * not sent again. Other failures are thrown as readJsonObject throws them.
 */
export async function readBilledAnswer(
  response: UpstreamResponse,
  upstream: string,
  signal: AbortSwitch,
  reading: AnswerReading = {},
): Promise<{ answer: Record<string, unknown> } | { failed: FailedAttempt }> {
  try {
    return { answer: await readJsonObject(response, upstream, signal, reading) };
  } catch (err) {
    if (!isBodyTooLarge(err)) throw err;
    return { failed: { kind: 'failed', error: err, outcome: 'error', httpStatus: response.statusCode, retryable: false, upstreamBilled: true } };
  }
}

/**
 * The failed attempt a 2xx JSON answer stands for when it is an error object instead of an answer:
 * a non-null `error` and no `choices` or `data` (OpenAI-compatible servers, proxies) or
 * `type: "error"` (Anthropic). Like the same error inside a stream (upstreamStreamError):
 * ZN_ERR_UPSTREAM_ERROR, retryable (a retry or a fallback may answer) unless it blames the request
 * or the node's key, or the node's account out of quota (quotaExhaustedAttempt); nothing was
 * answered, so nothing is charged. undefined for an answer. `upstreamKey`: the node's key for the
 * upstream, never quoted from the error (upstreamAnswerError), as on an error status.
 */
export function inBandFailure(answer: Record<string, unknown>, upstream: string, httpStatus: number, upstreamKey: string | undefined): FailedAttempt | undefined {
  const anthropicError = answer.type === 'error';
  // An `error` beside an answer's own payload (choices, data) is not taken for a failure: only a body that is nothing but the error.
  const errorObject = answer.error !== undefined && answer.error !== null && answer.choices === undefined && answer.data === undefined;
  if (!anthropicError && !errorObject) return undefined;
  const error = upstreamAnswerError(upstream, answer, upstreamKey);
  if (error.quotaExhaustion !== undefined) return quotaExhaustedAttempt(error.quotaExhaustion, 'error', httpStatus);
  return { kind: 'failed', error, outcome: 'error', httpStatus, retryable: error.retryable };
}

/**
 * The failed attempt of a JSON request whose upstream answered 2xx JSON that is neither an error
 * object (inBandFailure) nor an answer of the API asked (`{}`, `{"ok":true}`, another API's answer
 * from a misconfigured proxy): no answer, as its stream twin is (notAnEventStream), so it is not
 * passed on as a success nor charged; retried and fallen back from as a 5xx is.
 */
export function notAnAnswer(upstream: string, httpStatus: number, what: string): FailedAttempt {
  return {
    kind: 'failed',
    error: zenovaError('ZN_ERR_UPSTREAM_ERROR', `Upstream "${upstream}" answered HTTP ${httpStatus} with JSON that is not ${what}.`, { retryable: true }),
    outcome: 'error',
    httpStatus,
    retryable: true,
  };
}

/**
 * The usage of a stream request's JSON answer when it is a whole answer of the API asked (a chat
 * completion, a message), null for one without usable usage (stage meter estimates it); undefined
 * for JSON that is no such answer.
 */
export type CompletionUsage = (answer: Record<string, unknown>) => UpstreamUsage | null | undefined;

/**
 * The failed attempt of a stream request the upstream answered without an event stream. A JSON
 * error object (a 2xx `{"error":…}`, as proxies answer a failure whatever was asked) is that error,
 * as inBandFailure judges it on the JSON path: retried and fallen back from alike. Anything else
 * (an upstream that ignored `stream: true`) would reach the SDK as an empty stream: a final
 * ZN_ERR_UPSTREAM_ERROR. When that is a whole answer (`completionUsage`) or JSON past
 * MAX_UPSTREAM_JSON_BYTES, the upstream did the work and bills it: `upstreamBilled`, with the
 * answer's usage (`billedUsage`; none: stage meter estimates the prompt), as an answer past its
 * bound is (readBilledAnswer). Other bodies (not JSON, JSON that is no such answer) are charged nothing.
 */
export async function notAnEventStream(
  response: UpstreamResponse,
  upstream: string,
  signal: AbortSwitch,
  completionUsage: CompletionUsage,
  upstreamKey: string | undefined,
): Promise<FailedAttempt> {
  const notStream: FailedAttempt = {
    kind: 'failed',
    error: zenovaError('ZN_ERR_UPSTREAM_ERROR', `Upstream "${upstream}" did not answer the stream request with an event stream.`),
    outcome: 'error',
    httpStatus: response.statusCode,
    retryable: false,
  };
  const contentType = response.headers['content-type'];
  if (typeof contentType !== 'string' || !/\bjson\b/i.test(contentType)) {
    // Drained, not destroyed: undici's destroy() without a reason emits an 'error' nobody listens to.
    void response.body.dump().catch(() => undefined);
    return notStream;
  }
  let answer: Record<string, unknown>;
  try {
    // Read whole, as the JSON path reads an answer: a full completion is usually past an error's worth.
    answer = await readJsonObject(response, upstream, signal);
  } catch (err) {
    // Aborts (the attempt's timeout, the caller leaving) are forwardPlan's to sort out.
    if (signal.aborted) throw err;
    if (!response.body.destroyed) void response.body.dump().catch(() => undefined);
    return isBodyTooLarge(err) ? { ...notStream, upstreamBilled: true } : notStream;
  }
  const inBand = inBandFailure(answer, upstream, response.statusCode, upstreamKey);
  if (inBand !== undefined) return inBand;
  const usage = completionUsage(answer);
  if (usage === undefined) return notStream;
  return { ...notStream, upstreamBilled: true, ...(usage === null ? {} : { billedUsage: usage }) };
}

/** The upstream's response headers worth passing on (none of its cookies, auth or hop-by-hop headers). */
export function passedHeaders(response: UpstreamResponse): Record<string, string> {
  const out: Record<string, string> = {};
  const type = response.headers['content-type'];
  if (typeof type === 'string') out['content-type'] = type;
  return out;
}
