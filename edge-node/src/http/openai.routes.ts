// The OpenAI-compatible caller surface: POST /v1/chat/completions (JSON and SSE) and GET /v1/models.
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { checkKeyStanding, identifyCaller } from '../auth/api-key-verifier.js';
import type { AuthenticatedKey } from '../auth/api-key-verifier.js';
import { isZenovaError, zenovaError } from '../errors.js';
import { listRoutes, resolveRoute } from '../routing/model-router.js';
import { parseJsonOrUndefined, readBodyBounded } from '../upstream/read-body.js';
import { classifyUpstreamFailure, isAbort, upstreamStatusError } from '../upstream/upstream-failure.js';
import type { UpstreamPool, UpstreamResponse } from '../upstream/upstream-pool.js';
import { callerWantsStreamUsage, chatCompletionRequestSchema, upstreamChatBody } from './chat-completion-request.js';
import { requestConfig } from './request-context.js';
import { relaySse, sseErrorEvent } from './sse-relay.js';
import { validateBody } from './validate-body.js';

/** Ceiling for a non-streaming upstream answer held in memory. */
const MAX_UPSTREAM_JSON_BYTES = 32 * 1024 * 1024;
/** Error bodies are read only for their code. */
const MAX_UPSTREAM_ERROR_BYTES = 64 * 1024;

export interface OpenAiRouteDeps {
  upstreams: UpstreamPool;
  /** `created` for the model list, in Unix seconds. */
  modelsCreatedAt: number;
}

/** The caller's key, as authenticated by the `authenticate` hook. */
const callerKeys = new WeakMap<FastifyRequest, AuthenticatedKey>();

export function registerOpenAiRoutes(app: FastifyInstance, deps: OpenAiRouteDeps): void {
  // Runs before the body is read, so unauthenticated callers cannot make the node parse bodies.
  // Everything after reads the request's own config snapshot, never the holder.
  const authenticate = async (request: FastifyRequest): Promise<void> => {
    const config = requestConfig(request);
    const entry = identifyCaller(config, request.headers);
    if (entry === undefined) return;
    // Logged also when the key is then refused (revoked, expired, suspended account).
    request.zenova.keyId = entry.id;
    if (entry.accountId !== null) request.zenova.accountId = entry.accountId;
    callerKeys.set(request, checkKeyStanding(config, entry));
  };

  const modelObject = (id: string) => ({ id, object: 'model', created: deps.modelsCreatedAt, owned_by: 'zenova' });

  app.get('/v1/models', { onRequest: authenticate }, async (request) => ({
    object: 'list',
    data: listRoutes(requestConfig(request), callerKeys.get(request)).map((route) => modelObject(route.alias)),
  }));

  app.get<{ Params: { id: string } }>('/v1/models/:id', { onRequest: authenticate }, async (request) =>
    modelObject(resolveRoute(requestConfig(request), request.params.id, callerKeys.get(request)).alias),
  );

  app.post('/v1/chat/completions', { onRequest: authenticate }, async (request, reply) => {
    const chat = validateBody(chatCompletionRequestSchema, request.body);
    const route = resolveRoute(requestConfig(request), chat.model, callerKeys.get(request));
    const upstreamName = route.upstream.name;
    const stream = chat.stream === true;
    Object.assign(request.zenova, { model: chat.model, upstream: upstreamName, stream });

    const abort = abortWhenCallerLeaves(reply);
    let upstreamResponse: UpstreamResponse;
    try {
      upstreamResponse = await deps.upstreams.request(route.upstream, {
        method: 'POST',
        path: '/chat/completions',
        body: JSON.stringify(upstreamChatBody(chat, route.upstreamModel)),
        accept: stream ? 'text/event-stream' : 'application/json',
        requestId: request.id,
        timeoutMs: route.timeoutMs,
        signal: abort.signal,
      });
    } catch (err) {
      if (isAbort(err, abort.signal)) return abandon(request, reply);
      throw err;
    }
    const { statusCode, headers, body } = upstreamResponse;

    if (statusCode < 200 || statusCode >= 300) {
      const errorBody = await readBodyBounded(body, MAX_UPSTREAM_ERROR_BYTES, upstreamName).then(parseJsonOrUndefined, () => undefined);
      throw upstreamStatusError(upstreamName, statusCode, errorBody);
    }

    const contentType = String(headers['content-type'] ?? '');
    if (stream && contentType.includes('text/event-stream')) {
      const relay = relaySse(body, {
        alias: chat.model,
        hideUsage: !callerWantsStreamUsage(chat),
        onUsage: (usage) => {
          request.zenova.usage = usage;
        },
      });
      const caller = Readable.from(endStreamOnFailure(relay, request, upstreamName, abort.signal, () => body.destroy()), { objectMode: false });
      return reply
        .code(200)
        .header('content-type', 'text/event-stream; charset=utf-8')
        .header('cache-control', 'no-cache')
        // Tells reverse proxies (nginx) not to buffer the stream.
        .header('x-accel-buffering', 'no')
        .send(caller);
    }

    let bytes: Buffer;
    try {
      bytes = await readBodyBounded(body, MAX_UPSTREAM_JSON_BYTES, upstreamName);
    } catch (err) {
      if (isAbort(err, abort.signal)) return abandon(request, reply);
      throw classifyUpstreamFailure(err, upstreamName);
    }
    const answer = parseJsonOrUndefined(bytes);
    if (typeof answer !== 'object' || answer === null || Array.isArray(answer)) {
      throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `Upstream "${upstreamName}" answered with a body that is not a JSON object.`);
    }
    const completion = answer as Record<string, unknown>;
    if (typeof completion.model === 'string') completion.model = chat.model;
    if (typeof completion.usage === 'object' && completion.usage !== null) request.zenova.usage = completion.usage as Record<string, unknown>;
    return reply.code(200).send(completion);
  });
}

/** Aborts the upstream call as soon as the caller's connection closes before the answer is complete. */
function abortWhenCallerLeaves(reply: FastifyReply): AbortController {
  const abort = new AbortController();
  reply.raw.once('close', () => {
    if (!reply.raw.writableFinished) abort.abort();
  });
  return abort;
}

/** The caller is gone, nothing can be sent: take the reply away from fastify and drop the socket. */
function abandon(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  request.log.info('caller disconnected; upstream call aborted');
  reply.hijack();
  reply.raw.destroy();
  return reply;
}

/**
 * Passes the relay through; if the upstream fails mid-stream (headers already sent), ends the
 * caller's stream with an SSE error event carrying the code instead of cutting it off silently.
 */
async function* endStreamOnFailure(
  relay: AsyncGenerator<string>,
  request: FastifyRequest,
  upstream: string,
  signal: AbortSignal,
  releaseUpstream: () => void,
): AsyncGenerator<string> {
  try {
    yield* relay;
  } catch (err) {
    if (isAbort(err, signal)) return;
    const failure = isZenovaError(err) ? err : classifyUpstreamFailure(err, upstream);
    request.zenova.errorCode = failure.code;
    request.log.warn({ code: failure.code, err: failure.cause ?? failure }, 'upstream stream failed');
    yield sseErrorEvent(failure.toBody());
  } finally {
    releaseUpstream();
  }
}
