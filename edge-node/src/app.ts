// Builds the node's HTTP app (fastify); it never listens, so tests and the CLI decide where.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import Fastify, { LogController } from 'fastify';
import type { FastifyBaseLogger, FastifyBodyParser, FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ConfigHolder } from './config/config-holder.js';
import { DEFAULT_MAX_BODY_BYTES } from './config/local-config.js';
import { SHOULD_RETRY_HEADER, isZenovaError, shouldRetryValue, zenovaError } from './errors.js';
import { isLoopbackHostHeader } from '../../proto/src/loopback-host.js';
import type { ZenovaError } from './errors.js';
import { ANTHROPIC_REQUEST_ID_HEADER, errorBodyFor, isAnthropicPath, registerAnthropicRoutes, wantsAnthropicRequestId } from './http/anthropic.routes.js';
import { keepBodyText } from './http/body-text.js';
import { unreadableCharset } from './http/json-charset.js';
import { registerMcpRoutes } from './http/mcp.routes.js';
import { notFoundError } from './http/not-found.js';
import { originFormOf } from './http/origin-form.js';
import { registerOpenAiRoutes } from './http/openai.routes.js';
import { registerReadinessRoutes } from './http/readiness.routes.js';
import type { ControlLinkView } from './http/readiness.routes.js';
import type { RequestContext } from './http/request-context.js';
import { httpServerTimeouts, requestTimeoutFor } from './http/request-timeout.js';
import { shownPath } from './http/shown-path.js';
import type { Logger } from './logger.js';
import type { PipelineServices } from './cli/node-services.js';
import { noCredit } from './billing/credit-leases.js';
import { noMetrics } from './metrics/pipeline-metrics.js';
import type { RequestWindow } from './metrics/request-window.js';
import type { PipelineDeps } from './pipeline/deps.js';
import { CALLER_GONE_STATUS } from './pipeline/run-pipeline.js';
import type { LineAwaitingRun } from './pipeline/run-pipeline.js';
import { InFlightRequests } from './http/in-flight-requests.js';
import { GetStreamStanding } from './providers/mcp/get-stream-standing.js';
import type { GetStreamStandingOptions } from './providers/mcp/get-stream-standing.js';
import { SessionOwners } from './providers/mcp/session-owners.js';
import { noRateLimits } from './rate-limit/rate-limiter.js';
import { noSpool } from './spool/request-spool.js';
import type { SpoolState } from './spool/spool-store.js';
import { CLIENT_REQUEST_ID_HEADER, REQUEST_ID_HEADER, clientRequestIdOf, generateRequestId } from './request-id.js';
import { UpstreamPool } from './upstream/upstream-pool.js';
import { TargetHealth, targetsOf } from './routing/target-health.js';
import { controlPlaneNow } from './pipeline/clock.js';
import type { Clock } from './pipeline/clock.js';
import { serverTlsOptions } from './tls/caller-tls.js';
import type { CallerTlsPair } from './tls/caller-tls.js';
import { trackUnusedConnections } from '../../proto/src/index.js';
import { keyNamingJsonParser } from '../../proto/src/json-body-parser.js';
import type { JsonParser } from '../../proto/src/json-body-parser.js';

export interface AppDeps {
  /** The config being served; every request takes its own snapshot of it when it arrives. */
  holder: ConfigHolder;
  logger: Logger;
  /** Request body limit; fixed for the app's life (fastify sets it at construction). */
  maxBodyBytes?: number;
  /** How long a request may take to arrive (then 408); default requestTimeoutFor(maxBodyBytes). Tests shorten it. */
  requestTimeoutMs?: number;
  /** The control link's state for /readyz; absent in stand-alone mode. */
  controlLink?: () => ControlLinkView;
  /** Whether the served config is the previous enrollment's, for /readyz; absent in stand-alone mode. */
  previousEnrollment?: () => boolean;
  /** The spool's fill and failing writes, for /readyz; absent (or undefined) without a spool. */
  spoolState?: () => SpoolState | undefined;
  /** Injected by tests. The app closes it on close. */
  upstreams?: UpstreamPool;
  /** Counts finished requests (and server-side failures) for the control heartbeat's figures. */
  requestWindow?: RequestWindow;
  /** Spool, limits, credit, metrics, MCP session owners for the pipeline; each defaults to "off" (session owners: in memory) for tests that are not about it. */
  services?: Partial<PipelineServices>;
  /** How open MCP GET streams' keys are re-checked (period, clock); tests shorten or move them. */
  getStreamStanding?: GetStreamStandingOptions;
  /**
   * The requests' clock (systemClock by default); serve's judges key and lease expiries by the
   * control plane's time, and so do GET stream re-checks unless getStreamStanding.now is given.
   */
  clock?: Clock;
  /** How long a caller may leave an answer unread before its connection is dropped (default 120 s); tests shorten it. */
  callerStallMs?: number;
  /** Serve HTTPS with this pair (checked by readCallerTls); plain HTTP when absent. Reloaded with reloadCallerTls. */
  https?: CallerTlsPair;
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const { holder } = deps;
  const bodyLimit = deps.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const requestTimeout = deps.requestTimeoutMs ?? requestTimeoutFor(bodyLimit);
  // The status the node's own answer to a parser error gave on a socket (408 for a request too slow).
  const parserAnswers = new WeakMap<Socket, number>();
  // Each response's request, for a parser error that fails its body (answered with its id, path
  // and shape) or closes the connection under it (noted in its line).
  const responseRequests = new WeakMap<ServerResponse, FastifyRequest>();
  // Requests whose Expect is not 100-continue (Node's checkExpectation), refused in onRequest.
  const unmetExpectations = new WeakSet<IncomingMessage>();
  // Connections whose last request was answered 404 before its body was read (onRequest): Node
  // discards that body, and a parser error in it (a bad chunk, a body too slow) belongs to a request
  // already answered, so the connection is closed without a second answer nobody asked for (once
  // that body was all read, a parser error is the next request's, answered as ever).
  const answeredBeforeBody = new WeakMap<Socket, IncomingMessage>();
  const upstreams = deps.upstreams ?? new UpstreamPool();
  const metrics = deps.services?.metrics ?? noMetrics;
  // Pools of origins a new config no longer names are closed once their calls finish.
  const unsubscribe = holder.onSwap(({ config }) => upstreams.retainOnly(config.upstreams.values()));
  // Widened to fastify's logger type so the instance is the plain FastifyInstance callers expect.
  const loggerInstance: FastifyBaseLogger = deps.logger;

  // Node's own 400 to an HTTP/1.1 request without Host has no body and no x-request-id: onRequest refuses it.
  const serverOptions = { ...httpServerTimeouts(requestTimeout), requireHostHeader: false };
  // Over TLS the same server options go to https.createServer. Fastify types an instance over HTTPS
  // apart (its `https` option is `null` on the plain-HTTP one we return): https.Server is an
  // http.Server for everything the app does, and reloadCallerTls reaches its TLS side.
  const transport = deps.https !== undefined
    ? { https: { ...serverTlsOptions(deps.https), ...serverOptions } as unknown as null }
    : { http: serverOptions };
  const app = Fastify({
    ...transport,
    loggerInstance,
    // One "request finished" line per request (below) instead of fastify's two.
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'requestId' }),
    bodyLimit,
    // Node answers a request still arriving after this (clientErrorHandler: 408); not the answer.
    requestTimeout,
    requestIdHeader: false,
    // An absolute-form target (`POST http://host/v1/messages`) is routed, checked, quoted and
    // logged by its path alone, as the origin form: never its authority (a `user:password@` in it).
    rewriteUrl: (req) => originFormOf(req.url ?? '/'),
    // Always the node's own id, never the caller's (request-id.ts: it keys the record and its charge).
    genReqId: () => generateRequestId(),
    // Fastify's own 503-on-close answer has neither x-request-id nor our error body; requests
    // that still arrive on open keep-alive connections while draining are simply served.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    clientErrorHandler: (err: NodeJS.ErrnoException, socket: Socket) => {
      if (answeredBeforeBody.get(socket)?.complete === false) {
        socket.destroy();
        return;
      }
      // Read before answering: a request whose head was parsed (its body failed or timed out) is
      // counted when its response closes (howItEnded); one that never got that far, only here.
      const requestInProgress = (socket as SocketWithResponse)._httpMessage != null;
      const status = answerParserError(err, socket, responseRequests);
      if (status === undefined) return;
      parserAnswers.set(socket, status);
      if (!requestInProgress) metrics.requestEndedBeforePipeline?.('rejected', 'ZN_ERR_INVALID_REQUEST');
    },
    // Errors fastify raises before routing (a URL that cannot be decoded) skip the hooks.
    frameworkErrors: (err, request, reply) => {
      const failure = toZenovaError(err, bodyLimit, request.url);
      // The hook's reply is typed by route generics it does not have; it is a plain reply.
      const plain = reply as unknown as FastifyReply;
      metrics.requestEndedBeforePipeline?.(failure.status >= 500 ? 'failed' : 'rejected', failure.code);
      if (wantsAnthropicRequestId(request.url, request.headers)) plain.header(ANTHROPIC_REQUEST_ID_HEADER, request.id);
      // onRequest, which echoes the caller's own id, did not run for this request.
      const clientRequestId = clientRequestIdOf(request.headers);
      if (clientRequestId !== undefined) plain.header(CLIENT_REQUEST_ID_HEADER, clientRequestId);
      const retry = shouldRetryValue(failure);
      if (retry !== undefined) plain.header(SHOULD_RETRY_HEADER, retry);
      void plain.code(failure.status).header(REQUEST_ID_HEADER, request.id).send(errorBodyFor(request.url, failure, request.headers));
    },
  });

  // Node's defaults answer 100 Continue to every Expect: 100-continue, and an empty 417 to any other
  // Expect. A request refused before its body is read (no Host, a declared Content-Length over the
  // limit, which fastify refuses unread) gets no 100 Continue; both reach the app (onRequest).
  app.server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    if (!lacksHost(req) && !(Number(req.headers['content-length']) > bodyLimit)) res.writeContinue();
    app.server.emit('request', req, res);
  });
  app.server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    unmetExpectations.add(req);
    app.server.emit('request', req, res);
  });

  // Spare connections with no request on them would hold close() for Node's headers timeout.
  const unused = trackUnusedConnections(app.server);
  let closing = false;
  const inFlight = new InFlightRequests();
  app.decorate('inFlight', inFlight);
  // "request finished" lines whose response closed before their pipeline run settled (a caller that
  // left mid-answer), until the run writes them; the app's close writes any still waiting. Each
  // holds plain values, never its request, reply or pipeline context.
  const linesAwaitingRun = new Set<AwaitingLine>();
  // Paths of the routes that serve callers through the pipeline (filled where they are registered, below).
  const gatewayRoutes = new Set<string>();
  app.addHook('preClose', async () => {
    closing = true;
    inFlight.drain();
    unused.close();
  });

  app.decorateRequest('zenova', null as never);
  app.decorateRequest('configSnapshot', null as never);
  app.decorateRequest('callerGone', null);
  app.decorateRequest('runSettledStatus', null);
  app.decorateRequest('lineAwaitingRun', null);
  // A callback hook, not an async one: no promise per request.
  app.addHook('onRequest', (request, reply, done) => {
    // A new request's head was read: the body of any earlier one on the connection was all read.
    answeredBeforeBody.delete(request.raw.socket);
    request.zenova = {};
    responseRequests.set(reply.raw, request);
    inFlight.add(request, reply.raw);
    // The one read of the holder per request: a swap from here on does not affect this request.
    request.configSnapshot = holder.current();
    reply.header(REQUEST_ID_HEADER, request.id);
    // On the raw response, so it also survives the runner taking over the response for streams.
    if (wantsAnthropicRequestId(request.url, request.headers)) reply.raw.setHeader(ANTHROPIC_REQUEST_ID_HEADER, request.id);
    const clientRequestId = clientRequestIdOf(request.headers);
    if (clientRequestId !== undefined) {
      request.zenova.clientRequestId = clientRequestId;
      reply.raw.setHeader(CLIENT_REQUEST_ID_HEADER, clientRequestId);
    }
    // 'close' fires for every response, also when the caller left before it finished (fastify's
    // onResponse does not), so each request gets exactly one line. The one listener per request.
    reply.raw.once('close', () => {
      inFlight.delete(request);
      if (!reply.raw.writableFinished) request.callerGone?.abort();
      const ended = howItEnded(request, reply, parserAnswers);
      // A caller that left mid-answer closes the response before its pipeline run has its outcome,
      // usage and status (499 for a JSON answer never sent): the run writes the line once it has.
      if (ended.callerAborted && request.callerGone !== null && request.runSettledStatus === null) {
        request.lineAwaitingRun = new AwaitingLine(request, reply, ended.status, linesAwaitingRun);
      } else {
        logRequestFinished(request, reply, ended);
      }
      // The heartbeat's figures are the callers' gateway requests: not a probe of /healthz or
      // /readyz (503 while not ready), nor a 404 for a path no route serves.
      if (request.routeOptions.url !== undefined && gatewayRoutes.has(request.routeOptions.url)) deps.requestWindow?.record(ended.status >= 500);
      // The pipeline counts the requests it ran (runPipeline sets callerGone first); these are the
      // ones answered before it (a refused body, encoding, path) or whose body never arrived.
      if (request.callerGone === null && (request.zenova.errorCode !== undefined || request.zenova.outcome === 'aborted')) {
        metrics.requestEndedBeforePipeline?.(request.zenova.outcome === 'aborted' ? 'aborted' : ended.status >= 500 ? 'failed' : 'rejected', request.zenova.errorCode ?? null);
      }
      // While closing, a keep-alive connection whose last request just ended would otherwise hold
      // server.close() open until its idle timeout.
      if (closing) setImmediate(() => app.server.closeIdleConnections());
    });
    // Compressed bodies are refused, not decoded: no decompression bomb, no unbounded inflate. A
    // path no route serves gets its 404 (below) whatever its body, this refusal included.
    const encoding = request.headers['content-encoding'];
    if (!request.is404 && encoding !== undefined && encoding.trim().toLowerCase() !== 'identity' && encoding.trim() !== '') {
      done(zenovaError('ZN_ERR_UNSUPPORTED_ENCODING', `Content-Encoding ${JSON.stringify(encoding.slice(0, 40))} is not supported; send the body uncompressed.`));
      return;
    }
    // The same for a body compressed as a transfer coding (`gzip, chunked`: Node's parser takes the
    // chunks off, never the gzip), which would otherwise be read as a body that is not UTF-8.
    const transfer = request.headers['transfer-encoding'];
    if (!request.is404 && transfer !== undefined && hasUnsupportedTransferCoding(transfer)) {
      done(zenovaError('ZN_ERR_UNSUPPORTED_ENCODING', `Transfer-Encoding ${JSON.stringify(transfer.slice(0, 40))} is not supported; send the body uncompressed (chunked alone, or with a Content-Length).`));
      return;
    }
    if (lacksHost(request.raw)) {
      done(zenovaError('ZN_ERR_INVALID_REQUEST', 'Invalid request: an HTTP/1.1 request must have a Host header.'));
      return;
    }
    // Without apiKeys (a local file) every caller is let in with the upstreams' keys injected, and
    // serve allows that on loopback only; a browser page that rebinds its own name to 127.0.0.1
    // reaches that port too, but its requests still name its host.
    const snapshot = request.configSnapshot;
    if (snapshot.ready && snapshot.config.apiKeys === null && !isLoopbackHostHeader(request.headers.host)) {
      done(zenovaError('ZN_ERR_MISDIRECTED_REQUEST'));
      return;
    }
    if (request.headers.expect !== undefined && unmetExpectations.has(request.raw)) {
      done(zenovaError('ZN_ERR_INVALID_REQUEST', `Invalid request: Expect ${JSON.stringify(request.headers.expect.slice(0, 40))} is not supported (only 100-continue).`, { status: 417 }));
      return;
    }
    // No route serves the path: answered here, before the body is read, so neither its size (fastify
    // would read up to the limit, then answer 413) nor its content replaces the 404 and its Base URL
    // hint. Node discards the unread body, and the connection serves the caller's next request.
    if (request.is404) {
      const { headers } = request.raw;
      if (headers['transfer-encoding'] !== undefined || (headers['content-length'] !== undefined && headers['content-length'] !== '0')) {
        answeredBeforeBody.set(request.raw.socket, request.raw);
      }
      done(notFoundError(request.method, request.url));
      return;
    }
    done();
  });

  // Only JSON bodies are accepted; anything else is rejected before the handler.
  app.removeContentTypeParser('text/plain');
  // Read as bytes, not text: fastify's 'string' reading replaces bytes that are not UTF-8 with
  // U+FFFD, and the node would forward (and charge for) a body the caller never sent.
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, jsonBodyParser(app.getDefaultJsonParser('error', 'error')));

  // onRequest answers a path no route serves before this handler (and the body) is reached.
  app.setNotFoundHandler(async (request) => {
    throw notFoundError(request.method, request.url);
  });

  app.setErrorHandler(async (err: FastifyError | ZenovaError | Error, request: FastifyRequest, reply: FastifyReply) => {
    if (bodyNeverArrived(request)) {
      // fastify's body reader passes on Node's "aborted" (ECONNRESET): the caller left, or Node
      // timed the body out and answered 408 itself. No bug, and no one left to answer: the
      // "request finished" line (howItEnded) says which.
      request.log.debug({ reason: err.message }, 'request body never arrived');
      // Nothing is sent: fastify would otherwise answer on a closed socket.
      return reply.hijack();
    }
    const failure = toZenovaError(err, bodyLimit, request.url);
    request.zenova.errorCode = failure.code;
    if (failure.code === 'ZN_ERR_INTERNAL') request.log.error({ err, code: failure.code }, 'request failed');
    // Upstream trouble is expected operations noise: one line, no stack.
    else if (failure.code.startsWith('ZN_ERR_UPSTREAM_')) request.log.warn({ code: failure.code, reason: failure.logMessage }, 'upstream call failed');
    else request.log.debug({ code: failure.code, reason: failure.logMessage }, 'request rejected');
    // The SDKs would otherwise resend a 5xx that cannot succeed (run-pipeline.ts sends the same hint).
    const retry = shouldRetryValue(failure);
    if (retry !== undefined) reply.header(SHOULD_RETRY_HEADER, retry);
    return reply.code(failure.status).header(REQUEST_ID_HEADER, request.id).send(errorBodyFor(request.url, failure, request.headers));
  });

  // Liveness only: the process answers. Whether it can serve is /readyz.
  app.get('/healthz', async () => ({ status: 'ok' }));
  registerReadinessRoutes(app, {
    holder,
    ...(deps.controlLink !== undefined ? { controlLink: deps.controlLink } : {}),
    ...(deps.previousEnrollment !== undefined ? { previousEnrollment: deps.previousEnrollment } : {}),
    ...(deps.spoolState !== undefined ? { spool: deps.spoolState } : {}),
    deleted: () => deps.services?.credit?.nodeDeletion?.() !== undefined,
  });

  const services = deps.services ?? {};
  // Open MCP GET streams re-checked on every swap and on a timer (a revoked or expired key's, a
  // disabled surface's or a deleted tool server's end), and ended at the stop and once the node is deleted.
  const clock = deps.clock;
  const credit = services.credit ?? noCredit;
  const getStreams = new GetStreamStanding(holder, deps.logger, {
    ...(clock !== undefined ? { now: () => controlPlaneNow(clock) } : {}),
    ...(credit.nodeDeletion !== undefined ? { deleted: () => credit.nodeDeletion?.() !== undefined } : {}),
    ...deps.getStreamStanding,
  });
  const pipeline: PipelineDeps = {
    nodeId: services.nodeId ?? 'local',
    logger: deps.logger,
    upstreams,
    limiter: services.limiter ?? noRateLimits,
    credit,
    spool: services.spool ?? noSpool,
    metrics,
    // Without one from the services (tests), this app's own table in memory.
    sessionOwners: services.sessionOwners ?? new SessionOwners(undefined, deps.logger),
    targetHealth: services.targetHealth ?? new TargetHealth(),
    getStreams,
    ...(deps.callerStallMs !== undefined ? { callerStallMs: deps.callerStallMs } : {}),
    ...(clock !== undefined ? { clock } : {}),
  };
  // A swap that changes an upstream's key (an operator's cure for a target ejected for a refused
  // key) has that upstream's targets start afresh at once; what was learnt of the others is kept.
  let served = holder.current();
  const unsubscribeHealth = holder.onSwap((next) => {
    const before = served;
    served = next;
    if (!before.ready) return;
    const restored = pipeline.targetHealth.keysChanged(before.config, next.config);
    for (const target of restored) deps.logger.info(target, "upstream target's key changed; back in its place");
  });
  // Read at each scrape, so the gauge follows config swaps and answers alike.
  metrics.watchTargetHealth?.(pipeline.targetHealth, () => {
    const snapshot = holder.current();
    return snapshot.ready ? targetsOf(snapshot.config) : [];
  });
  // The gateway's routes (the model and tools surfaces), as the heartbeat's figures count them.
  let registeringGatewayRoutes = true;
  app.addHook('onRoute', (route) => {
    if (registeringGatewayRoutes) gatewayRoutes.add(route.url);
  });
  registerOpenAiRoutes(app, pipeline);
  registerAnthropicRoutes(app, pipeline);
  registerMcpRoutes(app, pipeline);
  registeringGatewayRoutes = false;

  // After the hook above: a push channel never drains, so a stop would otherwise wait out serve's
  // deadline and then cut it. Each ends cleanly and its connection then closes as any drained one.
  app.addHook('preClose', async () => {
    getStreams.endAll();
  });
  app.addHook('onClose', async () => {
    // The bound on a line waiting for its run: one still going at the close is written now.
    for (const line of [...linesAwaitingRun]) line.writeUnsettled();
    unsubscribe();
    unsubscribeHealth();
    getStreams.stop();
    await upstreams.close();
  });

  return app;
}

/** An HTTP/1.1 request without Host, which RFC 9112 has a server refuse (Node does, unless told not to). */
function lacksHost(raw: IncomingMessage): boolean {
  return raw.headers.host === undefined && raw.httpVersionMajor === 1 && raw.httpVersionMinor === 1;
}

/**
 * Whether a Transfer-Encoding names a coding other than chunked and identity (gzip, deflate, br, …),
 * read as an HTTP list: case-insensitive names, optional whitespace, parameters and empty elements.
 * Node's parser refuses a request whose last coding is not chunked; it decodes only that one.
 */
function hasUnsupportedTransferCoding(value: string): boolean {
  return value.split(',').some((element) => {
    const coding = (element.split(';', 1)[0] ?? '').replace(/[ \t]/g, '').toLowerCase();
    return coding !== '' && coding !== 'chunked' && coding !== 'identity';
  });
}

/** The connection closed before the request's body was in: it cannot be read, nor answered. */
function bodyNeverArrived(request: FastifyRequest): boolean {
  return !request.raw.complete && (request.raw.destroyed || request.raw.socket.destroyed);
}

interface RequestEnd {
  status: number;
  /** The caller left before the answer ended. */
  callerAborted: boolean;
}

/**
 * The status a request ended with (and, for one whose body never arrived, its code and outcome for
 * the log line). Such a request has no answer of its own: Node's 408 for a body too slow, else the
 * caller left (CALLER_GONE_STATUS, as the pipeline records a caller that leaves); neither is a
 * failure of the node.
 */
function howItEnded(request: FastifyRequest, reply: FastifyReply, parserAnswers: WeakMap<Socket, number>): RequestEnd {
  const callerAborted = !reply.raw.writableFinished;
  if (!callerAborted || request.raw.complete) return { status: reply.statusCode, callerAborted };
  const answered = parserAnswers.get(request.raw.socket);
  if (answered !== undefined) {
    request.zenova.errorCode = 'ZN_ERR_INVALID_REQUEST';
    request.zenova.outcome = 'rejected';
    return { status: answered, callerAborted: false };
  }
  request.zenova.outcome = 'aborted';
  return { status: CALLER_GONE_STATUS, callerAborted };
}

/**
 * The line of a request whose response has closed. An answer that did not all go out has the
 * status its pipeline run's record has, when one ran (499 for a JSON answer never sent, the status
 * sent for a stream), not the reply's.
 */
function logRequestFinished(request: FastifyRequest, reply: FastifyReply, { status, callerAborted }: RequestEnd): void {
  request.log.info(
    {
      method: request.method,
      path: request.url.split('?', 1)[0],
      status: callerAborted ? (request.runSettledStatus ?? status) : status,
      durationMs: Math.round(reply.elapsedTime),
      ...request.zenova,
      ...(callerAborted ? { callerAborted } : {}),
    },
    'request finished',
  );
}

/**
 * The "request finished" line of a caller that left before its pipeline run settled, written by
 * the run when it settles (the fields it copies into the request's notes, the status its record
 * has), or at the app's close if it never does. Plain values and the request's notes only: never
 * the request, its reply or the run's context. Written once.
 */
class AwaitingLine implements LineAwaitingRun {
  private readonly log: FastifyBaseLogger;
  private readonly method: string;
  private readonly path: string | undefined;
  /** Until the response closed. */
  private readonly durationMs: number;
  private readonly notes: RequestContext;
  /** The reply's status, and whether its head went out, when the response closed. */
  private readonly closedStatus: number;
  private readonly headSent: boolean;

  constructor(request: FastifyRequest, reply: FastifyReply, closedStatus: number, private readonly waiting: Set<AwaitingLine>) {
    this.log = request.log;
    this.method = request.method;
    this.path = request.url.split('?', 1)[0];
    this.durationMs = Math.round(reply.elapsedTime);
    this.notes = request.zenova;
    this.closedStatus = closedStatus;
    this.headSent = reply.raw.headersSent;
    waiting.add(this);
  }

  /** The run has settled: `status` is its record's. */
  write(status: number): void {
    if (this.waiting.delete(this)) this.writeLine(status, false);
  }

  /** At the app's close, the run still going: what was known then, 499 unless a head went out. */
  writeUnsettled(): void {
    if (this.waiting.delete(this)) this.writeLine(this.headSent ? this.closedStatus : CALLER_GONE_STATUS, true);
  }

  private writeLine(status: number, runUnsettled: boolean): void {
    this.log.info(
      {
        method: this.method,
        path: this.path,
        status,
        durationMs: this.durationMs,
        ...this.notes,
        callerAborted: true,
        ...(runUnsettled ? { runUnsettled } : {}),
      },
      'request finished',
    );
  }
}

/**
 * Decodes a caller's body, throwing at the first byte sequence that is not UTF-8. `ignoreBOM` keeps
 * a leading byte order mark in the text, as Buffer#toString does (the JSON parser skips it).
 */
const UTF8_STRICT = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The shared JSON parser (`__proto__` keys named as the reason), behind a charset check: a body
 * declared in another charset (utf-16, latin1, …) is refused, because the node reads every body as
 * UTF-8, so its text would be misread, not converted. The bytes must be UTF-8 (RFC 8259 §8.1): a
 * body that is not is not JSON text and is refused as such, never read with U+FFFD in place of its
 * bad bytes.
 */
function jsonBodyParser(strict: JsonParser): FastifyBodyParser<Buffer> {
  const parse = keyNamingJsonParser(strict, () =>
    zenovaError('ZN_ERR_INVALID_REQUEST', 'Invalid request: the body has a "__proto__" or "constructor.prototype" key, which this node refuses.'));
  return (request, body, done) => {
    // Clients that label every request JSON send `DELETE /mcp/{server}` (which ends a session) with
    // an empty body: no body, not invalid JSON. A POST still needs one.
    if (body.length === 0 && request.method !== 'POST') {
      done(null, undefined);
      return;
    }
    const charset = unreadableCharset(request.headers['content-type']);
    if (charset !== undefined) {
      done(zenovaError('ZN_ERR_UNSUPPORTED_CHARSET', `The request body's charset ${JSON.stringify(charset.slice(0, 40))} is not supported; send JSON as UTF-8 (charset=utf-8, or no charset).`), undefined);
      return;
    }
    let text: string;
    try {
      // One pass that checks and decodes; no copy of the bytes beyond the one fastify already made.
      text = UTF8_STRICT.decode(body);
    } catch {
      done(zenovaError('ZN_ERR_INVALID_JSON', 'The request body is not valid JSON: it is not valid UTF-8.'), undefined);
      return;
    }
    return parse(request, text, (err, value) => {
      if (err === null) keepBodyText(request, text);
      done(err, value);
    });
  };
}

/**
 * Fastify's own errors (body parsing, limits, URLs) mapped onto the node's table. Fastify's
 * messages are never passed on: those about the URL quote it raw, query string (a caller's key)
 * and all, at any length; only `shownPath(url)` is quoted.
 */
function toZenovaError(err: FastifyError | Error, bodyLimit: number, url: string): ZenovaError {
  if (isZenovaError(err)) return err;
  const code = (err as FastifyError).code;
  const status = (err as FastifyError).statusCode;
  switch (code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return zenovaError('ZN_ERR_INVALID_JSON', 'The request body is not valid JSON.');
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return zenovaError('ZN_ERR_BODY_TOO_LARGE', `The request body is larger than ${bodyLimit} bytes.`);
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return zenovaError('ZN_ERR_INVALID_REQUEST', 'Invalid request: Content-Type must be application/json.');
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return zenovaError('ZN_ERR_INVALID_REQUEST', 'Invalid request: the body\'s size did not match its Content-Length.');
    case 'FST_ERR_BAD_URL':
      return zenovaError('ZN_ERR_INVALID_REQUEST', `Invalid request: the URL path ${JSON.stringify(shownPath(url))} cannot be decoded (every % must start a %XX escape of UTF-8).`);
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return zenovaError('ZN_ERR_INVALID_REQUEST', `Invalid request: a segment of the URL path ${JSON.stringify(shownPath(url))} is longer than the node accepts (100 characters, fastify's limit on a path parameter such as /mcp/{server}).`);
  }
  // Any other fastify client error: its code only, as its message may quote the request.
  if (typeof code === 'string' && code.startsWith('FST_ERR_') && typeof status === 'number' && status >= 400 && status < 500) {
    return zenovaError('ZN_ERR_INVALID_REQUEST', `Invalid request (${code}).`);
  }
  return zenovaError('ZN_ERR_INTERNAL', undefined, { cause: err });
}

/** `METHOD SP target SP HTTP/x.y` at the start of a read, as Node's parser reads it. */
const REQUEST_LINE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+ (\S+) HTTP\/\d\.\d\r?\n/;
const HEADERS_END = Buffer.from('\r\n\r\n');

/**
 * The request target of the request Node's parser failed on, when it can be known. Node hands over
 * only the read it was parsing (`rawPacket`) and where in it it failed (`bytesParsed`): the target
 * is that read's first line when the read starts with a request line and no headers end before the
 * failure (so no earlier request shares the read). Headers that arrived over several reads, or a
 * request pipelined behind another in one read, leave it unknown.
 */
function failedRequestTarget(err: NodeJS.ErrnoException & { rawPacket?: unknown; bytesParsed?: unknown }): string | undefined {
  const packet = err.rawPacket;
  if (!Buffer.isBuffer(packet)) return undefined;
  const failedAt = typeof err.bytesParsed === 'number' ? Math.min(err.bytesParsed, packet.length) : packet.length;
  const line = REQUEST_LINE.exec(packet.subarray(0, Math.min(failedAt, 8192)).toString('latin1'));
  if (line === null || packet.subarray(0, failedAt).includes(HEADERS_END)) return undefined;
  return line[1];
}

/** Node's own field: the response of the request being answered on a connection, if any. */
type SocketWithResponse = Socket & { _httpMessage?: ServerResponse | null };

/**
 * Requests node's HTTP parser rejects never reach fastify; answer them in the same shape, with an
 * x-request-id, instead of fastify's default body: Anthropic's shape (and `request-id`) when the
 * failed request's target is known and is under /v1/messages, OpenAI's otherwise. A request whose
 * head was read (its body failed) is answered as that request: its id, path and headers. Returns
 * the status answered, undefined when the socket was gone or nothing could be written.
 */
function answerParserError(err: NodeJS.ErrnoException, socket: Socket, responseRequests: WeakMap<ServerResponse, FastifyRequest>): number | undefined {
  // The caller left: a reset, or the end of its connection before its request was all there (the
  // parser's "invalid EOF state"). No one to answer; the request's line says it left.
  if (err.code === 'ECONNRESET' || err.code === 'HPE_INVALID_EOF_STATE' || socket.destroyed) {
    socket.destroy();
    return undefined;
  }
  // A request pipelined behind one still being answered failed: an answer written now would land in
  // the middle of that one's, or be read as its answer when that one has not begun (Node's own
  // handler holds back only in the first case). The connection is closed, which cuts that answer.
  const inProgress = (socket as SocketWithResponse)._httpMessage;
  const request = inProgress == null ? undefined : responseRequests.get(inProgress);
  if (inProgress != null && (inProgress.headersSent || inProgress.req.complete)) {
    if (request !== undefined) request.zenova.closedByNode = 'malformed pipelined request';
    socket.destroy();
    return undefined;
  }
  let status = 400;
  let reason = 'Bad Request';
  let message = 'Invalid request: the HTTP request could not be parsed.';
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    [status, reason, message] = [408, 'Request Timeout', 'Invalid request: the request took too long to arrive.'];
  } else if (err.code === 'HPE_HEADER_OVERFLOW') {
    [status, reason, message] = [431, 'Request Header Fields Too Large', 'Invalid request: the request headers are too large.'];
  }
  // A request whose head was read and whose body failed (cut short, timed out, a bad chunk) has its
  // id, path and headers: its answer carries the id its "request finished" line logs, in the shape
  // its path gets. Otherwise (no head read) a fresh id and the target of the read that failed.
  const target = request?.url ?? originFormOf(failedRequestTarget(err) ?? '');
  const requestId = request?.id ?? generateRequestId();
  const error = zenovaError('ZN_ERR_INVALID_REQUEST', message, { status });
  const body = JSON.stringify(errorBodyFor(target, error, request?.headers));
  const wantsRequestId = request !== undefined ? wantsAnthropicRequestId(target, request.headers) : isAnthropicPath(target);
  const anthropicHeader = wantsRequestId ? `${ANTHROPIC_REQUEST_ID_HEADER}: ${requestId}\r\n` : '';
  // Already checked header-safe (REQUEST_ID_PATTERN) when onRequest echoed it.
  const clientRequestId = request?.zenova.clientRequestId;
  const clientHeader = clientRequestId === undefined ? '' : `${CLIENT_REQUEST_ID_HEADER}: ${clientRequestId}\r\n`;
  // As on every error answer: the SDKs would otherwise resend a 408 on their own rule.
  const retry = shouldRetryValue(error);
  const retryHeader = retry === undefined ? '' : `${SHOULD_RETRY_HEADER}: ${retry}\r\n`;
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${reason}\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\n${REQUEST_ID_HEADER}: ${requestId}\r\n${anthropicHeader}${clientHeader}${retryHeader}\r\n${body}`,
    );
  }
  socket.destroy(err);
  return status;
}
