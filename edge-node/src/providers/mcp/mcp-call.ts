/**
 * The `mcp` API (surface `tools`): /mcp/{server} relays MCP streamable-HTTP calls to the tool
 * server of that name in the node's config, under the pipeline's auth, limits and recording.
 * POST carries JSON-RPC (checked as an envelope here; the tool server judges the rest), GET opens
 * the server's event stream, DELETE ends a session. JSON answers become json replies (so output
 * guardrails see tool results); event streams and anything else are relayed byte for byte.
 */
import type { UpstreamAttempt } from '../../../../proto/src/index.js';
import type { Dispatcher } from 'undici';
import { isZenovaError, zenovaError } from '../../errors.js';
import type { ZenovaError } from '../../errors.js';
import type { PipelineContext, UpstreamReply } from '../../pipeline/context.js';
import { reject, rejectWith } from '../../pipeline/stage.js';
import type { StageResult } from '../../pipeline/stage.js';
import { parseJsonOrUndefined, readBodyBounded } from '../../upstream/read-body.js';
import { classifyUpstreamFailure, isAbort, upstreamStatusError } from '../../upstream/upstream-failure.js';
import { describeIssues } from '../../zod-issues.js';
import type { ApiHandler } from '../api-handler.js';
import { estimateTokens } from '../token-estimate.js';
import { callLabel, jsonRpcPostSchema, toolCallTexts, toolResultTexts } from './jsonrpc-message.js';
import type { JsonRpcPost } from './jsonrpc-message.js';
import { callToolServer, returnedHeaders } from './tool-server-call.js';
import type { ToolServerMethod } from './tool-server-call.js';

/** A tool server's JSON answer held in memory at most this big. */
const MAX_JSON_ANSWER_BYTES = 32 * 1024 * 1024;
const MAX_ERROR_BODY_BYTES = 64 * 1024;
/** ctx.responseText keeps this much of a relayed stream (for the record). */
const MAX_RESPONSE_TEXT_CHARS = 64 * 1024;
/** Tool server statuses that are the node's problem (its key), not the caller's. */
const NODE_SIDE_STATUSES = new Set([401, 403, 407]);
const SERVER_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** What identify parsed for forward; kept beside the context (a batch is not a forwardBody object). */
interface McpCall {
  method: ToolServerMethod;
  /** The validated, caller-owned copy of the body that is sent (guardrails' masks land in it). */
  payload?: JsonRpcPost;
  /** Recorded as served.model: the JSON-RPC method, `batch`, or the HTTP method for GET/DELETE. */
  label: string;
}

const calls = new WeakMap<PipelineContext, McpCall>();

function serverName(ctx: PipelineContext): string {
  return ctx.http.params.server ?? '';
}

function accepts(ctx: PipelineContext, type: string): boolean {
  const accept = ctx.http.headers.accept;
  return typeof accept === 'string' && accept.toLowerCase().includes(type);
}

function elapsed(ctx: PipelineContext, since: number): number {
  return Math.max(0, ctx.clock.monotonic() - since);
}

function attemptOutcome(error: ZenovaError): UpstreamAttempt['outcome'] {
  if (error.code === 'ZN_ERR_UPSTREAM_TIMEOUT') return 'timeout';
  if (error.code === 'ZN_ERR_UPSTREAM_UNAVAILABLE') return 'connect';
  return 'error';
}

export const mcpApi: ApiHandler = {
  api: 'mcp',
  surface: 'tools',

  identify(ctx: PipelineContext): StageResult {
    // Bounded: the name is a path segment the caller chose; route refuses unknown ones.
    ctx.model = serverName(ctx).slice(0, 128);
    const method = ctx.http.method.toUpperCase();
    if (method === 'GET' || method === 'DELETE') {
      ctx.stream = method === 'GET';
      calls.set(ctx, { method, label: method });
      return undefined;
    }
    if (method !== 'POST') return reject('ZN_ERR_NOT_FOUND', `No route for ${method} /mcp/{server}.`);
    // A copy the node owns: guardrail masks rewrite it, never the body as received.
    const parsed = jsonRpcPostSchema.safeParse(ctx.body === undefined ? undefined : structuredClone(ctx.body));
    if (!parsed.success) return reject('ZN_ERR_INVALID_REQUEST', `Invalid request: ${describeIssues(parsed.error, 1).join('; ')}`);
    const payload = parsed.data;
    if (!Array.isArray(payload)) ctx.forwardBody = payload;
    ctx.inputTexts = toolCallTexts(payload);
    ctx.estimatedInputTokens = ctx.inputTexts.reduce((sum, slot) => sum + estimateTokens(slot.text), 0);
    // MCP clients accept both; whether the answer streams is the tool server's choice.
    ctx.stream = accepts(ctx, 'text/event-stream') && !accepts(ctx, 'application/json');
    calls.set(ctx, { method: 'POST', payload, label: callLabel(payload) });
    return undefined;
  },

  route(ctx: PipelineContext): StageResult {
    const name = serverName(ctx);
    const server = ctx.config?.toolServers.get(name);
    if (server === undefined) {
      // Only a well-formed name is quoted back.
      return reject('ZN_ERR_TOOL_SERVER_NOT_FOUND', SERVER_NAME.test(name) ? `No tool server "${name}" on this node.` : undefined);
    }
    ctx.toolServer = server;
    return undefined;
  },

  async forward(ctx: PipelineContext): Promise<StageResult> {
    const server = ctx.toolServer;
    const call = calls.get(ctx);
    if (server === undefined || call === undefined) return reject('ZN_ERR_INTERNAL');
    const attempt = (outcome: UpstreamAttempt['outcome'], httpStatus: number | null): void => {
      ctx.attempts.push({ upstream: server.name, model: call.label, outcome, httpStatus, durationMs: elapsed(ctx, started) });
    };
    const started = ctx.clock.monotonic();
    let response: Dispatcher.ResponseData;
    try {
      response = await callToolServer(server, {
        method: call.method,
        callerHeaders: ctx.http.headers,
        ...(call.payload !== undefined ? { body: JSON.stringify(call.payload) } : {}),
        requestId: ctx.requestId,
        signal: ctx.callerGone,
      });
    } catch (err) {
      if (isAbort(err, ctx.callerGone)) {
        attempt('aborted', null);
        return reject('ZN_ERR_UPSTREAM_UNAVAILABLE', 'The caller went away before the tool server answered.');
      }
      const error = isZenovaError(err) ? err : classifyUpstreamFailure(err, server.name);
      attempt(attemptOutcome(error), null);
      return rejectWith(error);
    }
    ctx.upstreamFirstByteMs = elapsed(ctx, started);
    const status = response.statusCode;

    // The tool server's own failures (and a refused node key) are the node's 502; its other 4xx
    // (404 unknown session, 405 no GET stream, 400) are MCP semantics the client acts on: relayed.
    if (status >= 500 || NODE_SIDE_STATUSES.has(status)) {
      const body = await readBodyBounded(response.body, MAX_ERROR_BODY_BYTES, server.name).then(parseJsonOrUndefined, () => undefined);
      ctx.upstreamMs = elapsed(ctx, started);
      attempt('status', status);
      return rejectWith(upstreamStatusError(server.name, status, body));
    }
    const headers = returnedHeaders(response.headers);
    const contentType = (headers['content-type'] ?? '').toLowerCase();

    if (contentType.startsWith('text/event-stream')) {
      // The GET stream answers nothing (it carries the server's unasked messages and stays open):
      // each message goes to the caller as it comes instead of waiting for the next.
      ctx.reply = { kind: 'raw', status, headers, body: relayStream(ctx, response, server.name, started), holdLast: call.method !== 'GET' };
      attempt('ok', status);
    } else {
      let bytes: Buffer;
      try {
        bytes = await readBodyBounded(response.body, MAX_JSON_ANSWER_BYTES, server.name);
      } catch (err) {
        const error = isAbort(err, ctx.callerGone) ? undefined : classifyUpstreamFailure(err, server.name);
        attempt(error === undefined ? 'aborted' : attemptOutcome(error), status);
        return rejectWith(error ?? zenovaError('ZN_ERR_UPSTREAM_UNAVAILABLE', 'The caller went away before the tool server answered.'));
      }
      ctx.upstreamMs = elapsed(ctx, started);
      ctx.reply = replyOf(ctx, status, headers, contentType, bytes);
      attempt('ok', status);
    }
    ctx.served = { upstream: server.name, model: call.label };
    return undefined;
  },
};

/** A JSON answer as a json reply (output guardrails read tool results), anything else as its bytes. */
function replyOf(ctx: PipelineContext, status: number, headers: Record<string, string>, contentType: string, bytes: Buffer): UpstreamReply {
  const answer = contentType.startsWith('application/json') && bytes.length > 0 ? parseJsonOrUndefined(bytes) : undefined;
  if (answer !== undefined) {
    const texts = toolResultTexts(answer);
    ctx.responseText = texts.map((slot) => slot.text).join('\n').slice(0, MAX_RESPONSE_TEXT_CHARS);
    return { kind: 'json', status, headers, body: answer, texts };
  }
  ctx.responseText = bytes.toString('utf8', 0, Math.min(bytes.length, MAX_RESPONSE_TEXT_CHARS));
  return { kind: 'raw', status, headers, body: oneChunk(bytes) };
}

async function* oneChunk(bytes: Buffer): AsyncGenerator<Uint8Array> {
  if (bytes.length > 0) yield bytes;
}

/**
 * The event stream's bytes as they come. Its end times the call; a read failure surfaces
 * classified (the runner ends the caller's stream), the caller's own abort as is.
 */
async function* relayStream(
  ctx: PipelineContext, response: Dispatcher.ResponseData, upstream: string, started: number,
): AsyncGenerator<Uint8Array> {
  const decoder = new TextDecoder();
  try {
    for await (const chunk of response.body as AsyncIterable<Buffer>) {
      if (ctx.responseText.length < MAX_RESPONSE_TEXT_CHARS) {
        ctx.responseText = (ctx.responseText + decoder.decode(chunk, { stream: true })).slice(0, MAX_RESPONSE_TEXT_CHARS);
      }
      yield chunk;
    }
  } catch (err) {
    if (isAbort(err, ctx.callerGone)) throw err;
    throw classifyUpstreamFailure(err, upstream);
  } finally {
    ctx.upstreamMs = elapsed(ctx, started);
    // A consumer that stops early (caller gone) must not leave the tool server's stream open.
    if (!response.body.destroyed) response.body.destroy();
  }
}
