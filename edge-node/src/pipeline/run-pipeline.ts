/**
 * Runs one request through PIPELINE (stages.ts) and delivers the answer. Route files call this; it
 * never throws for an expected rejection (the reply carries the code).
 *
 * The head stages (every stage not marked `always`) run in order until one rejects; the outcome is
 * then known and the tail stages (meter, settle, spool) run for every request. Delivery keeps the
 * record durable before the caller's last byte: a JSON answer is serialised first (one that cannot
 * be is an invalid upstream answer) and sent after the tail stages; a stream's events are written
 * as they are pulled, but its terminal event (and anything after it) waits for the tail stages; a
 * raw body's last chunk likewise, or (holdLast false) what follows an empty chunk (its source
 * bounds that). Cleanups run once at the very end, then the metrics see the finished request. Hot
 * path: no per-event closures, no re-serialising. An answer whose record's commit waits (a full
 * disk) until the node's stop closes its connection, or its caller leaves, never goes out: its
 * queued record is stamped again as the stop ended it, or as a caller that left (undelivered).
 */
import { performance } from 'node:perf_hooks';
import type { ServerResponse } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { SHOULD_RETRY_HEADER, isZenovaError, shouldRetryValue, zenovaError } from '../errors.js';
import type { ZenovaError } from '../errors.js';
import type { RequestRecord } from '../../../proto/src/index.js';
import { bodyTextOf } from '../http/body-text.js';
import { buildRequestRecord } from '../spool/request-record-builder.js';
import { isNodeStopping } from '../http/in-flight-requests.js';
import { API_HANDLERS } from '../providers/api-handlers.js';
import { serialiseSse } from '../providers/sse.js';
import { stringifyAsWritten } from '../providers/json-string-slots.js';
import { REQUEST_ID_HEADER } from '../request-id.js';
import { classifyUpstreamFailure } from '../upstream/upstream-failure.js';
import { systemClock } from './clock.js';
import { AbortSwitch } from './abort-switch.js';
import { newPipelineContext } from './new-context.js';
import { keepResponseText } from './response-text.js';
import { estimateTokens } from '../providers/token-estimate.js';
import type { ApiKind, Outcome, PipelineContext, StreamEvent, Surface, TextSlot, UpstreamReply } from './context.js';
import type { PipelineDeps } from './deps.js';
import { rejectWith } from './stage.js';
import type { Stage, StageName, StageResult } from './stage.js';
import { PIPELINE } from './stages.js';

export interface PipelineCall {
  api: ApiKind;
  surface: Surface;
}

/** nginx's "client closed request": the status recorded for a caller that left before any answer. */
export const CALLER_GONE_STATUS = 499;
/** ctx.responseText keeps at most this many characters for the record (the output estimate counts all: response-text.ts). */
export const MAX_RESPONSE_TEXT_CHARS = 256 * 1024;

const HEAD: readonly Stage[] = PIPELINE.filter((stage) => !stage.always);
const TAIL: readonly Stage[] = PIPELINE.filter((stage) => stage.always);
const NO_PARAMS: Readonly<Record<string, string>> = Object.freeze({});

/** fastify's own type for a JSON body it serialises; a string body it sends as is only under a JSON type. */
const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

/** How long a caller may leave an answer unread (its socket not draining) before the node drops it. */
export const CALLER_STALL_MS = 120_000;

/**
 * A request's "request finished" line (app.ts) whose response closed before its pipeline run had
 * settled (a caller that left mid-answer): the run writes it when it settles, with the status its
 * record has. It holds plain values and the request's notes, never the run's context.
 */
export interface LineAwaitingRun {
  write(status: number): void;
}

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * Null until the request's pipeline run has settled what its "request finished" line says
     * (outcome, usage, key, model, upstream: copied into `zenova`), then the status its record has.
     */
    runSettledStatus: number | null;
    /** Set by app.ts when the response closed before the run settled; the run writes it then. */
    lineAwaitingRun: LineAwaitingRun | null;
  }
}

const STREAM_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  // Tells reverse proxies (nginx) not to buffer the stream.
  'x-accel-buffering': 'no',
};

export async function runPipeline(request: FastifyRequest, reply: FastifyReply, deps: PipelineDeps, call: PipelineCall): Promise<FastifyReply> {
  const raw = reply.raw;
  // Aborted by the app's one 'close' listener (app.ts) when the caller leaves before the end.
  const gone = new AbortSwitch();
  request.callerGone = gone;
  // The node's stop ended the requests running when it came: one that reaches the pipeline after it
  // (its body still arriving then, or sent on a connection still open) goes no further.
  const stopping = request.server.inFlight?.stopReason;
  if (stopping !== undefined) gone.abort(stopping);
  // A caller that left while its body was still being read: 'close' has fired already.
  if (raw.closed && !raw.writableFinished) gone.abort();
  const snapshot = request.configSnapshot;
  const ctx = newPipelineContext({
    requestId: request.id,
    clientRequestId: request.zenova.clientRequestId,
    api: call.api,
    surface: call.surface,
    http: {
      method: request.method,
      path: pathOf(request.url),
      headers: request.headers,
      rawHeaders: request.raw.rawHeaders,
      params: (request.params as Record<string, string> | undefined) ?? NO_PARAMS,
      bodyText: bodyTextOf(request),
    },
    body: request.body,
    deps,
    clock: deps.clock ?? systemClock,
    callerGone: gone,
    // identify refuses the request when the node had no config when it arrived.
    config: snapshot?.ready === true ? snapshot.config : undefined,
  });
  const run = new PipelineRun(request, reply, ctx);
  deps.metrics.requestStarted?.(ctx);
  try {
    let failure: ZenovaError | undefined;
    let failedAt: StageName | undefined;
    for (const stage of HEAD) {
      // Most stages are synchronous: no promise and no microtask hop for them.
      let result = run.stage(stage);
      if (result instanceof Promise) result = await result;
      if (result !== undefined) {
        failure = result.error;
        failedAt = stage.name;
        break;
      }
    }
    // Noted before delivery too: a line whose run never settles (its record's commit held) is
    // written at the app's close with what the head stages learnt.
    run.noteForLog();
    const answer = ctx.reply;
    if (failure === undefined && answer !== undefined) {
      if (answer.kind === 'json') await run.deliverJson(answer);
      else if (answer.kind === 'stream') await run.deliverStream(answer);
      else await run.deliverRaw(answer);
    } else {
      // A stage refused after forward opened a reply (guardrails-out): release the upstream body.
      await run.discard(answer);
      await run.deliverError(failure ?? zenovaError('ZN_ERR_INTERNAL', 'The request produced no answer.'), failedAt);
    }
  } catch (err) {
    // Delivery itself failed (a bug, or the socket in a state we did not expect): answer if still possible.
    request.log.error({ err, requestId: ctx.requestId }, 'request delivery failed');
    await run.tail();
    if (!raw.headersSent && !gone.aborted && !reply.sent) {
      const failure = zenovaError('ZN_ERR_INTERNAL');
      request.zenova.errorCode = failure.code;
      // In the surface's own error shape, as every other error (the SDKs read their own).
      const retry = shouldRetryValue(failure);
      if (retry !== undefined) reply.header(SHOULD_RETRY_HEADER, retry);
      void reply.code(failure.status).send(API_HANDLERS[ctx.api].errorBody?.(failure, ctx) ?? failure.toBody());
    } else if (!raw.writableEnded) {
      raw.destroy();
    }
  } finally {
    run.finish();
  }
  return reply;
}

function pathOf(url: string): string {
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
}

/** One request's delivery state; a class so the hot path creates one object, not a closure per step. */
class PipelineRun {
  private tailDone: Promise<void> | undefined;
  private finished = false;

  constructor(
    private readonly request: FastifyRequest,
    private readonly reply: FastifyReply,
    private readonly ctx: PipelineContext,
  ) {}

  /** The caller left (its socket closed) before the answer ended: nothing more can be sent. */
  private callerLeft(): boolean {
    const { callerGone } = this.ctx;
    return callerGone.aborted && (!isNodeStopping(callerGone.reason) || this.reply.raw.destroyed);
  }

  /** ZN_ERR_NODE_STOPPING when the node's stop, not the caller, aborted the request. */
  private stoppedBy(): ZenovaError | undefined {
    const { callerGone } = this.ctx;
    return callerGone.aborted && isNodeStopping(callerGone.reason) ? callerGone.reason : undefined;
  }

  /**
   * Runs one stage, timed; an exception is ZN_ERR_INTERNAL (logged with the request id). Returns
   * a promise only for a stage that returned one.
   */
  stage(stage: Stage): StageResult | Promise<StageResult> {
    const started = performance.now();
    let pending: StageResult | Promise<StageResult>;
    try {
      pending = stage.run(this.ctx);
    } catch (err) {
      return this.stageFailed(stage, started, err);
    }
    if (pending instanceof Promise) {
      return pending.then(
        (result) => this.stageDone(stage, started, result),
        (err: unknown) => this.stageFailed(stage, started, err),
      );
    }
    return this.stageDone(stage, started, pending);
  }

  private stageDone(stage: Stage, started: number, result: StageResult): StageResult {
    this.ctx.stagesUs[stage.name] = Math.round((performance.now() - started) * 1000);
    return result;
  }

  private stageFailed(stage: Stage, started: number, err: unknown): StageResult {
    this.request.log.error({ err, requestId: this.ctx.requestId, stage: stage.name }, 'pipeline stage failed');
    return this.stageDone(stage, started, rejectWith(isZenovaError(err) ? err : zenovaError('ZN_ERR_INTERNAL', undefined, { cause: err })));
  }

  /** The tail stages, once; their rejections and failures are logged, never sent (the answer is already decided). */
  tail(): Promise<void> {
    this.tailDone ??= this.runTail();
    return this.tailDone;
  }

  private async runTail(): Promise<void> {
    for (const stage of TAIL) {
      let result = this.stage(stage);
      if (result instanceof Promise) result = await result;
      if (result !== undefined) this.request.log.warn({ requestId: this.ctx.requestId, stage: stage.name, code: result.error.code }, 'tail stage refused');
    }
  }

  /**
   * The tail stages before an answer recorded as delivered (or its end) goes out. Its record's
   * commit may wait (a full disk) past the node's stop, which then closes the connection, or past
   * its caller leaving: the answer never reaches the caller, and the spool stamps its record, still
   * queued, again (undelivered): at the stop's close of the connections, or at once when the caller
   * leaves (or had left before the tail). `sentStatus`: the status of a head already written (a
   * stream, a relayed body); undefined for a JSON answer, none of which goes out before its record.
   */
  private async tailBeforeAnswer(sentStatus: number | undefined): Promise<void> {
    const tail = this.tail();
    const { ctx } = this;
    if (ctx.outcome.status !== 'ok') return tail;
    const spool = ctx.deps.spool;
    const unregister = spool.onUndelivered?.(ctx.requestId, () => this.undelivered(sentStatus));
    if (unregister === undefined) return tail;
    // The stop stamps what it cut itself (cli/serve.ts), once every connection is closed.
    const callerLeft = (): void => {
      if (!isNodeStopping(ctx.callerGone.reason)) spool.stampUndelivered?.();
    };
    if (ctx.callerGone.aborted) callerLeft();
    else ctx.callerGone.once('abort', callerLeft);
    try {
      await tail;
    } finally {
      ctx.callerGone.off('abort', callerLeft);
      unregister();
    }
  }

  /**
   * The record of an answer kept from its caller while the record waited for its commit (a full
   * disk); undefined for any other. Recorded `ok` and charged in full, the answer was billed
   * although its caller never got it. When the node's stop ended the request and closed its
   * connection: `failed` with ZN_ERR_NODE_STOPPING, as every request the stop ends
   * (docs/node-api.md), and charged what reached the caller (docs/billing.md): a model's JSON
   * answer nothing (settled again, so the lease is charged what the record says), a stream or
   * relayed body what it carried (all but its end), a tool call the call the tool server ran. When
   * the caller left: `aborted`, as every caller that leaves before its answer's end (499 for a
   * JSON answer, the status sent for the rest), a model's JSON answer charged its prompt (the
   * upstream had it and bills it, as for a caller that leaves before the answer comes: billing.md),
   * a stream or relayed body what it carried, a tool call the call.
   */
  private undelivered(sentStatus: number | undefined): RequestRecord | undefined {
    const { ctx } = this;
    if (ctx.outcome.status !== 'ok' || !ctx.callerGone.aborted) return undefined;
    const modelJson = sentStatus === undefined && ctx.toolServer === undefined;
    const stopped = this.stoppedBy();
    if (stopped !== undefined) {
      // Destroyed at once by the stop's closeAllConnections (the response's own 'close' comes later).
      const cut = this.request.raw.socket?.destroyed === true || this.reply.raw.destroyed;
      if (!cut) return undefined;
      ctx.outcome = { status: 'failed', httpStatus: sentStatus ?? stopped.status, errorCode: stopped.code };
      if (modelJson) {
        // As a request the stop ended before its answer came (forward-plan.ts): no upstream, no usage.
        ctx.served = undefined;
        ctx.upstreamUsage = null;
        ctx.usage = { inputTokens: 0, outputTokens: 0, estimated: false };
        ctx.deps.credit.settle(ctx);
      }
    } else {
      ctx.outcome = { status: 'aborted', httpStatus: sentStatus ?? CALLER_GONE_STATUS, errorCode: null };
      if (modelJson) {
        // None of the answer was read; the prompt was, by the upstream (its own count kept).
        ctx.usage = { ...ctx.usage, outputTokens: 0 };
        ctx.deps.credit.settle(ctx);
      }
    }
    const record = buildRequestRecord(ctx, { keepBodies: false });
    // The record is final now, while its commit may still wait (a full disk) for long: so is the line.
    this.settle();
    return record;
  }

  /** Closes a reply that will not be delivered, so its upstream connection is released. */
  async discard(answer: UpstreamReply | undefined): Promise<void> {
    if (answer === undefined || answer.kind === 'json') return;
    const source = answer.kind === 'stream' ? answer.events : answer.body;
    await source[Symbol.asyncIterator]().return?.().catch(() => undefined);
  }

  async deliverError(refusal: ZenovaError, failedAt: StageName | undefined): Promise<void> {
    const { ctx, request, reply } = this;
    // The node's stop ended the request (its upstream call aborted): that, not the abort, is the
    // answer; as the provider worded it when it knows more (an MCP call the tool server had).
    const stopped = this.stoppedBy();
    const failure = stopped === undefined || refusal.code === 'ZN_ERR_NODE_STOPPING' ? refusal : stopped;
    if (this.callerLeft()) {
      ctx.outcome = { status: 'aborted', httpStatus: CALLER_GONE_STATUS, errorCode: null };
    } else if (failure.code === 'ZN_ERR_NODE_STOPPING') {
      ctx.outcome = { status: 'failed', httpStatus: failure.status, errorCode: failure.code };
    } else {
      // 'failed' once something went upstream; the forward stage refusing before any attempt (its
      // open row could not be written) is a refusal like the earlier stages'.
      const failed = (failedAt === 'forward' && ctx.attempts.length > 0) || failure.code === 'ZN_ERR_INTERNAL';
      ctx.outcome = { status: failed ? 'failed' : 'rejected', httpStatus: failure.status, errorCode: failure.code };
    }
    await this.tail();
    this.noteForLog();
    if (this.callerLeft()) {
      this.abandon();
      return;
    }
    if (failure.code === 'ZN_ERR_INTERNAL') request.log.error({ err: failure.cause ?? failure, code: failure.code }, 'request failed');
    // Upstream trouble is expected operations noise: one line, no stack.
    else if (failure.code.startsWith('ZN_ERR_UPSTREAM_')) request.log.warn({ code: failure.code, reason: failure.logMessage }, 'upstream call failed');
    else if (failure.code === 'ZN_ERR_NODE_STOPPING') request.log.warn({ code: failure.code }, 'request still running at the stop deadline; ended by the node');
    else request.log.debug({ code: failure.code, reason: failure.logMessage }, 'request rejected');
    const body = API_HANDLERS[ctx.api].errorBody?.(failure, ctx) ?? failure.toBody();
    const retry = shouldRetryValue(failure);
    // Without the hint the SDKs resend every 5xx, also those that cannot succeed (upstream 401 → 502).
    if (retry !== undefined) reply.header(SHOULD_RETRY_HEADER, retry);
    await reply.code(failure.status).headers(ctx.responseHeaders).send(body);
    this.dropIfUnread();
  }

  async deliverJson(answer: Extract<UpstreamReply, { kind: 'json' }>): Promise<void> {
    const { ctx, reply } = this;
    // Serialised before the record is written, once (the string is what is sent): an answer that
    // cannot be (nested deeper than the engine's stack) must not be recorded as delivered.
    let payload: string;
    try {
      payload = answer.asWritten?.() ?? stringifyAsWritten(answer.body);
    } catch (err) {
      await this.deliverUnserialisable(err);
      return;
    }
    this.keepText(answer.texts);
    ctx.outcome = deliveredOutcome(answer);
    await this.tailBeforeAnswer(undefined);
    this.noteForLog();
    // An answer whole before the node's stop ended the request still goes out.
    if (this.callerLeft()) {
      this.abandon();
      return;
    }
    ctx.replyHeadSent = true;
    // A string is sent as is only under a JSON content type; the upstream's, when it named one, wins.
    await reply.code(answer.status).type(JSON_CONTENT_TYPE).headers(answer.headers).headers(ctx.responseHeaders).send(payload);
    this.dropIfUnread();
  }

  /**
   * A JSON answer the node cannot serialise is an invalid upstream answer, as one that is not JSON
   * (readJsonObject): ZN_ERR_UPSTREAM_ERROR, its attempt failed. Nothing was delivered, so a model's
   * answer is not charged; a tool server's call ran and is, as one whose answer never came (billing.md).
   */
  private async deliverUnserialisable(err: unknown): Promise<void> {
    const { ctx } = this;
    const upstream = ctx.toolServer?.name ?? ctx.served?.upstream ?? 'upstream';
    const attempt = ctx.attempts[ctx.attempts.length - 1];
    if (attempt !== undefined) attempt.outcome = 'error';
    if (ctx.toolServer === undefined) {
      ctx.served = undefined;
      ctx.upstreamUsage = null;
    }
    const why = err instanceof RangeError ? 'nested too deeply' : 'not serialisable';
    await this.deliverError(zenovaError('ZN_ERR_UPSTREAM_ERROR', `Upstream "${upstream}" answered with JSON the node cannot pass on (${why}).`, { cause: err }), 'forward');
  }

  async deliverStream(answer: Extract<UpstreamReply, { kind: 'stream' }>): Promise<void> {
    const { ctx, request } = this;
    const raw = this.hijack(answer.status, { ...answer.headers, ...STREAM_HEADERS });
    ctx.outcome = { status: 'ok', httpStatus: answer.status, errorCode: null };
    this.noteForLog();
    const held: StreamEvent[] = [];
    let failure: ZenovaError | undefined;
    const events = answer.events[Symbol.asyncIterator]();
    let drained = true;
    try {
      for (;;) {
        const next = await events.next();
        if (next.done === true) break;
        const event = next.value;
        this.keepText(event.texts);
        if (held.length > 0 || event.terminal === true) {
          held.push(event);
          continue;
        }
        if (!raw.write(serialiseSse(event.sse))) await this.waitForDrain(raw);
        if (ctx.callerGone.aborted) {
          drained = false;
          break;
        }
      }
    } catch (err) {
      drained = false;
      if (!ctx.callerGone.aborted) {
        failure = isZenovaError(err) ? err : classifyUpstreamFailure(err, ctx.served?.upstream ?? 'upstream');
        if (failure.code === 'ZN_ERR_GUARDRAIL_BLOCKED') request.log.info({ code: failure.code, reason: failure.logMessage }, 'stream stopped by a guardrail');
        else request.log.warn({ code: failure.code, reason: failure.logMessage }, 'upstream stream failed');
      }
    }
    if (!drained) await events.return?.().catch(() => undefined);
    if (!ctx.callerGone.aborted && failure !== undefined && failure.code.startsWith('ZN_ERR_UPSTREAM_')) this.streamAttemptFailed(failure);
    const left = this.callerLeft();
    // Ended by the node's stop: the caller gets the stream's error event, as for an upstream failure;
    // unless the answer was whole (its terminal event held while a lingering body was drained).
    if (!left && held.length === 0) failure = this.stoppedBy() ?? failure;
    if (left) ctx.outcome = { status: 'aborted', httpStatus: answer.status, errorCode: null };
    // An output guardrail stopping the stream is the node refusing, not the upstream failing.
    else if (failure !== undefined) ctx.outcome = { status: failure.code === 'ZN_ERR_GUARDRAIL_BLOCKED' ? 'rejected' : 'failed', httpStatus: answer.status, errorCode: failure.code };
    await this.tailBeforeAnswer(answer.status);
    this.noteForLog();
    if (left) {
      raw.destroy();
      return;
    }
    if (failure !== undefined) {
      raw.end(serialiseSse(answer.errorEvent(failure.code, failure.message, failure).sse));
      return;
    }
    let rest = '';
    for (const event of held) rest += serialiseSse(event.sse);
    raw.end(rest);
  }

  /**
   * The upstream failed the stream after its first event: its attempt, recorded ok when that event
   * came, is a failed one that lasted to the failure (as an attempt failing before it would be).
   */
  private streamAttemptFailed(failure: ZenovaError): void {
    const { ctx } = this;
    ctx.upstreamStreamFailure = failure;
    const attempt = ctx.attempts[ctx.attempts.length - 1];
    if (attempt === undefined) return;
    attempt.outcome = failure.code === 'ZN_ERR_UPSTREAM_TIMEOUT' ? 'timeout' : failure.code === 'ZN_ERR_UPSTREAM_UNAVAILABLE' ? 'connect' : 'error';
    if (ctx.upstreamMs !== null) attempt.durationMs = ctx.upstreamMs;
  }

  async deliverRaw(answer: Extract<UpstreamReply, { kind: 'raw' }>): Promise<void> {
    const { ctx, request } = this;
    const raw = this.hijack(answer.status, answer.headers);
    const holdLast = answer.holdLast !== false;
    // A body relayed as it comes (an event stream): the caller gets the head now, not with its first chunk.
    if (!holdLast) raw.flushHeaders();
    ctx.outcome = deliveredOutcome(answer);
    this.noteForLog();
    let last: Uint8Array | undefined;
    // Without holdLast, an empty chunk marks what completes the answer: it and the rest wait for the tail.
    let held: Uint8Array[] | undefined;
    let failure: ZenovaError | undefined;
    // Whether the body ended as its source ended it: an MCP POST stream the node's stop ended ends
    // with error answers to its pending requests (holdAnswer), which go out whole.
    let whole = false;
    try {
      for await (const chunk of answer.body) {
        if (held !== undefined) held.push(chunk);
        else if (holdLast) {
          if (last !== undefined && !raw.write(last)) await this.waitForDrain(raw);
          last = chunk;
        } else if (chunk.length === 0) held = [];
        else if (!raw.write(chunk)) await this.waitForDrain(raw);
        if (this.callerLeft()) break;
      }
      whole = !this.callerLeft();
    } catch (err) {
      if (!ctx.callerGone.aborted) {
        failure = isZenovaError(err) ? err : classifyUpstreamFailure(err, ctx.toolServer?.name ?? ctx.served?.upstream ?? 'upstream');
        request.log.warn({ code: failure.code, reason: failure.logMessage }, 'upstream body failed');
      }
    }
    const left = this.callerLeft();
    if (!left && !whole) failure = this.stoppedBy() ?? failure;
    if (left) ctx.outcome = { status: 'aborted', httpStatus: answer.status, errorCode: null };
    else if (failure !== undefined) ctx.outcome = { status: 'failed', httpStatus: answer.status, errorCode: failure.code };
    await this.tailBeforeAnswer(answer.status);
    this.noteForLog();
    // A relayed body cut short cannot be mended in its own framing: the caller sees it end early.
    if (left || failure !== undefined) raw.destroy();
    else raw.end(held === undefined ? last : Buffer.concat(held));
  }

  /**
   * Resolves when the socket can take more, or is gone (the caller's abort is seen by the loop). A
   * caller that stops reading without closing would otherwise hold the upstream call, its
   * concurrency slot and its reservation for as long as it likes: after callerStallMs without a
   * drain its connection is dropped, and the request ends as a caller that left (partial usage metered).
   * The node's stop ends the wait too: the request is then ended by the node and recorded so while
   * its caller still holds the connection, not cut when the sockets close as if its caller had left.
   */
  private waitForDrain(raw: ServerResponse): Promise<void> {
    const stallMs = this.ctx.deps.callerStallMs ?? CALLER_STALL_MS;
    const { callerGone } = this.ctx;
    if (callerGone.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const stalled = setTimeout(() => this.dropStalledCaller(stallMs), stallMs);
      const done = (): void => {
        clearTimeout(stalled);
        raw.off('drain', done);
        raw.off('close', done);
        callerGone.off('abort', done);
        resolve();
      };
      raw.on('drain', done);
      raw.on('close', done);
      callerGone.on('abort', done);
    });
  }

  /**
   * A JSON or error answer is handed to the socket whole: a caller that stops reading would hold it
   * (up to 192 MiB for embeddings) and its connection for ever. While some of it is unsent, a socket
   * that took nothing in a whole callerStallMs is dropped, as waitForDrain drops a stream's; one
   * that reads slowly is not (a drain may be minutes away for a large answer).
   */
  private dropIfUnread(): void {
    const raw = this.reply.raw;
    if (raw.writableFinished || raw.destroyed || raw.writableLength === 0) return;
    const stallMs = this.ctx.deps.callerStallMs ?? CALLER_STALL_MS;
    let unsent = raw.writableLength;
    const check = setInterval(() => {
      if (raw.writableLength < unsent) {
        unsent = raw.writableLength;
        return;
      }
      clearInterval(check);
      this.dropStalledCaller(stallMs);
    }, stallMs);
    const done = (): void => clearInterval(check);
    raw.once('finish', done);
    raw.once('close', done);
  }

  private dropStalledCaller(stallMs: number): void {
    this.request.log.warn({ stallMs }, 'caller stopped reading the answer; its connection is closed');
    this.request.zenova.closedByNode = 'caller stopped reading';
    this.reply.raw.destroy();
  }

  /** Takes the response from fastify and writes the head (x-request-id and the stages' headers included). */
  private hijack(status: number, headers: Record<string, string>): ServerResponse {
    this.reply.hijack();
    const raw = this.reply.raw;
    raw.writeHead(status, { ...headers, ...this.ctx.responseHeaders, [REQUEST_ID_HEADER]: this.ctx.requestId });
    this.ctx.replyHeadSent = true;
    return raw;
  }

  /** The caller is gone, nothing can be sent: take the reply away from fastify and drop the socket. */
  private abandon(): void {
    this.request.log.info('caller disconnected; upstream call aborted');
    this.reply.hijack();
    this.reply.raw.destroy();
  }

  /**
   * Counts delivered text the model wrote (not TextSlot.notGenerated) in full and keeps it in
   * ctx.responseText up to the bound; texts billed as input are counted (their token estimate, not
   * kept) instead.
   */
  private keepText(texts: readonly TextSlot[]): void {
    const ctx = this.ctx;
    for (const slot of texts) {
      if (slot.notGenerated === true) {
        if (slot.billedAsInput === true) ctx.deliveredInputTokens += estimateTokens(slot.text);
        continue;
      }
      keepResponseText(ctx, slot.text, MAX_RESPONSE_TEXT_CHARS);
    }
  }

  /** What the one "request finished" line says about the request: plain values copied from ctx. */
  noteForLog(): void {
    const { ctx } = this;
    const note = this.request.zenova;
    if (ctx.presentedKey !== undefined) note.keyId = ctx.presentedKey.id;
    if (ctx.key?.accountId != null) note.accountId = ctx.key.accountId;
    if (ctx.config?.version != null) note.configVersion = ctx.config.version;
    if (ctx.model !== null) note.model = ctx.model;
    if (ctx.served !== undefined) note.upstream = ctx.served.upstream;
    note.stream = ctx.stream;
    if (ctx.served !== undefined) note.usage = { inputTokens: ctx.usage.inputTokens, outputTokens: ctx.usage.outputTokens, estimated: ctx.usage.estimated };
    if (ctx.outcome.errorCode !== null) note.errorCode = ctx.outcome.errorCode;
    if (ctx.outcome.status !== 'ok') note.outcome = ctx.outcome.status;
  }

  /**
   * What the request's "request finished" line says is final (what its record and the metrics
   * say): its fields are copied onto the request, with the record's status, and a line waiting for
   * them (its response closed first) is written now. Nothing of ctx is kept past the run.
   */
  private settle(): void {
    const { request } = this;
    if (request.runSettledStatus !== null) return;
    this.noteForLog();
    const status = this.ctx.outcome.httpStatus;
    request.runSettledStatus = status;
    const line = request.lineAwaitingRun;
    if (line === null) return;
    request.lineAwaitingRun = null;
    line.write(status);
  }

  /** Cleanups once, then metrics; neither may break the response. Then the run has settled. */
  finish(): void {
    if (this.finished) return;
    this.finished = true;
    const { ctx } = this;
    for (const cleanup of ctx.cleanups) {
      try {
        cleanup();
      } catch (err) {
        this.request.log.error({ err, requestId: ctx.requestId }, 'request cleanup failed');
      }
    }
    try {
      ctx.deps.metrics.requestFinished(ctx);
    } catch (err) {
      this.request.log.error({ err, requestId: ctx.requestId }, 'request metrics failed');
    }
    this.settle();
  }
}

/** How a reply delivered in full is recorded: ok, or failed when it relays an upstream's error status. */
function deliveredOutcome(answer: Extract<UpstreamReply, { kind: 'json' | 'raw' }>): Outcome {
  if (answer.failure === undefined) return { status: 'ok', httpStatus: answer.status, errorCode: null };
  return { status: 'failed', httpStatus: answer.status, errorCode: answer.failure };
}


