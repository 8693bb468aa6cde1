/**
 * The `mcp` API (surface `tools`): /mcp/{server} relays MCP streamable-HTTP calls to the tool
 * server of that name in the node's config, under the pipeline's auth, limits and recording.
 * POST carries JSON-RPC (checked as an envelope here; the tool server judges the rest), GET opens
 * the server's event stream, DELETE ends a session. Bodies go on as written both ways (sentBody,
 * asWritten) unless the node rewrote them. JSON answers become json replies (so output
 * guardrails see tool results); event streams and anything else are relayed as they come, checked
 * by guardMcpOutput (from guardrails-out) when the key's policy has output rules. The node's key
 * for the tool server is redacted from every answer (redactSecret, withoutSecret,
 * withoutSecretEvents); an answer it could not redact or check as sent (compressed, or JSON in a
 * charset other than UTF-8) is refused (unrelayableAnswerError). A session belongs to the key that
 * opened it (session-owners.ts). Billing (docs/billing.md, "Tool calls"): a tool server's 4xx is
 * relayed but not charged; a call it received is charged even if no answer comes.
 * Tool calls are priced per call: their records carry no token usage (stage meter) and they count
 * against no tokens/min window (node-rate-limiter.ts), only requests/min and concurrency.
 */
import { isUtf8 } from 'node:buffer';
import type { ToolServer, UpstreamAttempt } from '../../../../proto/src/index.js';
import type { Dispatcher } from 'undici';
import type { GuardrailVerdict } from '../../../../proto/src/index.js';
import { isZenovaError, zenovaError } from '../../errors.js';
import type { ErrorCode, ZenovaError } from '../../errors.js';
import type { CompiledPolicy } from '../../guardrails/compiled-policy.js';
import { applyPolicy } from '../../guardrails/policy-engine.js';
import type { PipelineContext, TextSlot, UpstreamReply } from '../../pipeline/context.js';
import { AbortSwitch } from '../../pipeline/abort-switch.js';
import { keepResponseText, replaceResponseText } from '../../pipeline/response-text.js';
import { reject, rejectWith } from '../../pipeline/stage.js';
import { isNodeStopping } from '../../http/in-flight-requests.js';
import { unreadableCharset } from '../../http/json-charset.js';
import type { StageResult } from '../../pipeline/stage.js';
import { toolServerFor, toolServerName } from '../../routing/route-tool-server.js';
import { parseJsonOrUndefined, readBodyBounded } from '../../upstream/read-body.js';
import { classifyUpstreamFailure, isAbort, unaskedEncodingError, upstreamStatusError } from '../../upstream/upstream-failure.js';
import { releaseConcurrencySlot } from '../../rate-limit/node-rate-limiter.js';
import { recordRequestBody, recordRequestBodyText } from '../../spool/request-record-builder.js';
import { describeIssues } from '../../zod-issues.js';
import type { ApiHandler } from '../api-handler.js';
import { stringifyAsWritten } from '../json-string-slots.js';
import { isPartial, uncheckedTextMessage } from '../partial-texts.js';
import { isRecord } from '../text-slot.js';
import type { DirtyMark } from '../text-slot.js';
import { estimateTokens } from '../token-estimate.js';
import { callLabel, idAsWritten, jsonRpcPostSchema, jsonTexts, messageTexts, misspeltEnvelopeField, parseRelayed, withJsonEscapesDecoded } from './jsonrpc-message.js';
import type { JsonRpcId, JsonRpcPost } from './jsonrpc-message.js';
import { admitGetStream } from './get-stream-limit.js';
import { EventBoundaries, holdCompletingEvent } from './mcp-answer-hold.js';
import { guardEventStream } from './mcp-event-guard.js';
import { answerPendingOnFailure } from './mcp-stream-failure.js';
import { decodeEscapesOf } from './secret-escapes.js';
import { secretFormsOf } from './secret-forms.js';
import { MIN_SECRET_CHARS, prefilterOf } from './secret-prefilter.js';
import { outputRulesOf } from './get-stream-standing.js';
import { callToolServer, returnedHeaders } from './tool-server-call.js';
import type { ToolServerMethod } from './tool-server-call.js';

/** A tool server's JSON answer held in memory at most this big. */
const MAX_JSON_ANSWER_BYTES = 32 * 1024 * 1024;
const MAX_ERROR_BODY_BYTES = 64 * 1024;
/** One event of a guarded event stream held in memory at most this long (as the JSON answer bound). */
const MAX_GUARDED_EVENT_CHARS = MAX_JSON_ANSWER_BYTES;
/**
 * How long a tool server may keep a POST's event stream open once the event completing the call
 * came (the MCP spec has it close the stream then), and how much of what it still sends is passed
 * on: the caller's answer waits at most that long, and the node holds at most that much besides it.
 */
const AFTER_ANSWER_GRACE_MS = 1000;
const MAX_AFTER_ANSWER_BYTES = 256 * 1024;
/** ctx.responseText keeps this much of an answer (for the record; its counts cover all of it, response-text.ts). */
const MAX_RESPONSE_TEXT_CHARS = 64 * 1024;
/** Added to a relayed event stream: a buffering reverse proxy (nginx) in front must pass each event on. */
const EVENT_STREAM_HEADERS = { 'x-accel-buffering': 'no' };
/** Tool server statuses that are the node's problem (its key), not the caller's. */
const NODE_SIDE_STATUSES = new Set([401, 403, 407]);

/** What identify parsed for forward; kept beside the context (a batch is not a forwardBody object). */
interface McpCall {
  method: ToolServerMethod;
  /** The validated, node-owned copy of the body (guardrails' masks land in it); sent as the caller's text unless masked (sentBody). */
  payload?: JsonRpcPost;
  /** Dirty once an input mask rewrote `payload`. */
  masked?: DirtyMark;
  /** The caller's text, which `payload` was parsed from (callerCopy), sent unless masked; undefined when it cannot go as written. */
  text?: string;
  /** Recorded as served.model: the JSON-RPC method, `batch`, or the HTTP method for GET/DELETE. */
  label: string;
  /** The body of a non-JSON, non-stream answer, for output guardrails (decoded only when they have rules). */
  rawBody?: Buffer;
  /** Output guardrails check the event stream: its text is recorded by the guard, after masking. */
  guarded?: boolean;
  /** An event stream's bytes as relayed (reply.body wraps them: the guard, the hold of a POST's answer). */
  source?: AsyncIterable<Uint8Array>;
  /** Closes the tool server's event stream (the hold's grace after the answer ran out). */
  closeSource?: () => void;
}

const calls = new WeakMap<PipelineContext, McpCall>();

/** The caller's Mcp-Session-Id as it is forwarded (tool-server-call.ts drops longer ones). */
function sessionIdOf(ctx: PipelineContext): string | undefined {
  const value = ctx.http.headers['mcp-session-id'];
  const first = Array.isArray(value) ? value[0] : value;
  return first === undefined || first.length === 0 || first.length > 1024 ? undefined : first;
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
    // Bounded: the name is a path segment the caller chose; surface and route refuse unknown ones.
    ctx.model = toolServerName(ctx).slice(0, 128);
    const method = ctx.http.method.toUpperCase();
    if (method === 'GET' || method === 'DELETE') {
      ctx.stream = method === 'GET';
      calls.set(ctx, { method, label: method });
      return undefined;
    }
    if (method !== 'POST') return reject('ZN_ERR_NOT_FOUND', `No route for ${method} /mcp/{server}.`);
    // A copy the node owns: guardrail masks rewrite it, never the body as received.
    const copy = callerCopy(ctx);
    const parsed = jsonRpcPostSchema.safeParse(copy.body);
    if (!parsed.success) return reject('ZN_ERR_INVALID_REQUEST', `Invalid request: ${describeIssues(parsed.error, 1).join('; ')}`);
    // The copy itself, not zod's rebuilt one: stringifyAsWritten knows the integers past 2^53 in it.
    const payload = copy.body as JsonRpcPost;
    const misspelt = misspeltEnvelopeField(payload);
    if (misspelt !== undefined) {
      const where = misspelt.index === undefined ? '' : ` (message ${misspelt.index + 1} of the batch)`;
      return reject('ZN_ERR_INVALID_REQUEST', `Invalid request: the key ${JSON.stringify(misspelt.key)}${where} differs from the JSON-RPC field "${misspelt.field}" only in letter case; a tool server that reads keys ignoring case could take it for that field, so the message is not sent. Write jsonrpc, id, method, params, result and error exactly, with no such look-alike key.`);
    }
    // MCP forbids it (initialize must come alone), and the node could not charge the batch's tool
    // calls if the session it opens then could not be bound to the caller (refused after the tool
    // server ran them).
    if (Array.isArray(payload) && payload.length > 1 && payload.some((m) => 'method' in m && m.method === 'initialize')) {
      return reject('ZN_ERR_INVALID_REQUEST', 'Invalid request: initialize must be sent alone, not in a batch with other messages (MCP lifecycle).');
    }
    if (!Array.isArray(payload)) ctx.forwardBody = payload;
    // The record keeps what is sent (masked), batches too (an array is no forwardBody); forward
    // records the caller's text instead when that is what goes.
    recordRequestBody(ctx, payload);
    const masked: DirtyMark = { dirty: false };
    ctx.inputTexts = messageTexts(payload, masked);
    ctx.estimatedInputTokens = ctx.inputTexts.reduce((sum, slot) => sum + estimateTokens(slot.text), 0);
    // MCP clients accept both; whether the answer streams is the tool server's choice.
    ctx.stream = accepts(ctx, 'text/event-stream') && !accepts(ctx, 'application/json');
    calls.set(ctx, { method: 'POST', payload, masked, ...(copy.text !== undefined ? { text: copy.text } : {}), label: callLabel(payload) });
    return undefined;
  },

  route(ctx: PipelineContext): StageResult {
    // Also checked in the surface stage, before the rate limits.
    const server = toolServerFor(ctx);
    if ('error' in server) return server;
    ctx.toolServer = server;
    const sessionId = sessionIdOf(ctx);
    if (sessionId !== undefined && ctx.key !== undefined) {
      const admitted = ctx.deps.sessionOwners.admit(server.name, sessionId, ctx.key.id);
      if (admitted === 'refused') return reject('ZN_ERR_TOOL_SESSION_NOT_FOUND');
      // The binding could not be read: a 404 would make the client drop a session that may be its own.
      if (admitted === 'unreadable') {
        ctx.responseHeaders['retry-after'] = '1';
        return reject('ZN_ERR_TOOL_SESSION_UNAVAILABLE', 'The node could not read which API key this MCP session belongs to; retry the call with the same Mcp-Session-Id.');
      }
    }
    // GET streams free their concurrency slot once relayed (relayStream): they have a limit of their own.
    if (calls.get(ctx)?.method === 'GET') return admitGetStream(ctx);
    return undefined;
  },

  async forward(ctx: PipelineContext): Promise<StageResult> {
    const server = ctx.toolServer;
    const call = calls.get(ctx);
    if (server === undefined || call === undefined) return reject('ZN_ERR_INTERNAL');
    const attempt = (outcome: UpstreamAttempt['outcome'], httpStatus: number | null): void => {
      ctx.attempts.push({ upstream: server.name, model: call.label, outcome, httpStatus, durationMs: elapsed(ctx, started) });
    };
    // A call the tool server got runs there whether or not its answer is read: it is charged even
    // when the caller leaves or the answer times out (billing.md, "Tool calls").
    const delivery = { sent: false };
    const served = (): void => {
      ctx.served = { upstream: server.name, model: call.label };
    };
    const started = ctx.clock.monotonic();
    let response: Dispatcher.ResponseData;
    try {
      response = await callToolServer(server, {
        method: call.method,
        callerHeaders: ctx.http.headers,
        ...(call.payload !== undefined ? { body: sentBody(ctx, call, call.payload) } : {}),
        requestId: ctx.requestId,
        signal: ctx.callerGone,
        onSent: () => (delivery.sent = true),
      });
    } catch (err) {
      if (isAbort(err, ctx.callerGone)) {
        attempt('aborted', null);
        if (delivery.sent) served();
        return rejectWith(stoppedWhile(ctx, call, server.name, delivery.sent) ?? zenovaError('ZN_ERR_UPSTREAM_UNAVAILABLE', 'The caller went away before the tool server answered.'));
      }
      const error = isZenovaError(err) ? err : classifyUpstreamFailure(err, server.name);
      if (!delivery.sent) {
        attempt(attemptOutcome(error), null);
        return rejectWith(error);
      }
      // A POST the tool server had whole runs there whatever became of the connection afterwards.
      if (call.method === 'POST' || error.code === 'ZN_ERR_UPSTREAM_TIMEOUT') served();
      const delivered = afterDelivery(call, server.name, error);
      attempt(delivered === error || error.code === 'ZN_ERR_UPSTREAM_TIMEOUT' ? attemptOutcome(error) : 'error', null);
      return rejectWith(delivered);
    }
    ctx.upstreamFirstByteMs = elapsed(ctx, started);
    const status = response.statusCode;

    // The tool server's own failures, a refused node key and a redirect (never followed: the URL in
    // the config is not the endpoint) are the node's 502. Its other 4xx (404 unknown session, 405
    // no GET stream, 400, 429) are MCP semantics the client acts on: relayed as they come, but
    // recorded failed and not charged, as an upstream 4xx on a model request. So is a 402 (a paid
    // tool's payment required): unlike a model upstream's (upstreamQuotaError, answered as the
    // node's account out of credit), it is the client's to act on, and no other target would answer.
    if (status >= 500 || NODE_SIDE_STATUSES.has(status) || (status >= 300 && status < 400)) {
      const body = await readBodyBounded(response.body, MAX_ERROR_BODY_BYTES, server.name).then(parseJsonOrUndefined, () => undefined);
      ctx.upstreamMs = elapsed(ctx, started);
      attempt('status', status);
      return rejectWith(status >= 400 ? upstreamStatusError(server.name, status, body, server.apiKey) : redirectError(server.name, status));
    }
    // A 405 to GET or DELETE is how a tool server says it offers no event stream or session end:
    // routine MCP, not a failure (and neither is charged).
    const routine = status === 405 && call.method !== 'POST';
    const failure: ErrorCode | undefined = status >= 400 && !routine ? 'ZN_ERR_UPSTREAM_ERROR' : undefined;
    const headers = withoutSecretHeaders(ctx, server, returnedHeaders(response.headers));
    const contentType = (headers['content-type'] ?? '').toLowerCase();
    const unbound = noteSession(ctx, call, status, headers['mcp-session-id']);
    if (unbound !== undefined) {
      // The session the tool server opened cannot be this caller's: its id is not handed out. The
      // answer is dropped with its connection (an SSE answer may stay open for hours).
      response.body.on('error', () => undefined).destroy();
      // A session the node could not record is ended at the tool server rather than left open
      // until it expires there, unless the id is (or may be) another caller's: a conflicting id,
      // or one the store binds or could not be read for.
      const opened = headers['mcp-session-id'];
      if (unbound === 'ZN_ERR_TOOL_SESSION_UNAVAILABLE' && opened !== undefined && ctx.deps.sessionOwners.unbound(server.name, opened)) {
        endUnrecordedSession(ctx, server, opened);
      }
      ctx.upstreamMs = elapsed(ctx, started);
      // A session file the node could not write is not the tool server's failure.
      attempt(unbound === 'ZN_ERR_TOOL_SESSION_UNAVAILABLE' ? 'ok' : 'status', status);
      if (unbound === 'ZN_ERR_TOOL_SESSION_UNAVAILABLE') ctx.responseHeaders['retry-after'] = '1';
      return reject(unbound);
    }

    const unrelayable = unrelayableAnswerError(server.name, response.headers, contentType, status);
    if (unrelayable !== undefined) {
      // Dropped with its connection, unread (an event stream may stay open for hours).
      response.body.on('error', () => undefined).destroy();
      ctx.upstreamMs = elapsed(ctx, started);
      attempt('error', status);
      // The tool server answered: the call ran, as when its answer is past the size bound.
      if (failure === undefined) served();
      return rejectWith(unrelayable);
    }

    if (contentType.startsWith('text/event-stream')) {
      // Each event goes to the caller as it comes: a server request (elicitation, sampling) or a
      // progress notification on a POST's stream must reach the client while the server waits.
      // Only the event that completes the POST is held until the record is durable
      // (mcp-answer-hold.ts); the GET stream answers nothing, so only its end is.
      call.source = relayStream(ctx, call, response, server.name, started);
      // Its read fails then (the hold takes that as the end); destroy() alone would raise an 'error' nobody may hear.
      call.closeSource = () => void (response.body.destroyed || response.body.on('error', () => undefined).destroy());
      ctx.reply = { kind: 'raw', status, headers: { ...headers, ...EVENT_STREAM_HEADERS }, body: holdAnswer(ctx, call, status, call.source), holdLast: false, failure };
    } else {
      let bytes: Buffer;
      try {
        bytes = await readBodyBounded(response.body, MAX_JSON_ANSWER_BYTES, server.name);
      } catch (err) {
        const error = isAbort(err, ctx.callerGone) ? undefined : classifyUpstreamFailure(err, server.name);
        const delivered = error === undefined ? undefined : afterDelivery(call, server.name, error);
        attempt(error === undefined || delivered === undefined ? 'aborted' : delivered === error || error.code === 'ZN_ERR_UPSTREAM_TIMEOUT' ? attemptOutcome(error) : 'error', status);
        // The tool server answered: the call ran, whatever cut its answer (a timeout, the caller
        // leaving, a reset, the size bound), as on an event stream, which is served at its headers.
        if (failure === undefined) served();
        return rejectWith(delivered ?? stoppedWhile(ctx, call, server.name, true) ?? zenovaError('ZN_ERR_UPSTREAM_UNAVAILABLE', 'The caller went away before the tool server answered.'));
      }
      ctx.upstreamMs = elapsed(ctx, started);
      const unreadable = unreadableBodyError(server.name, contentType, bytes);
      if (unreadable !== undefined && failure === undefined) {
        attempt('error', status);
        served();
        return rejectWith(unreadable);
      }
      if (unreadable !== undefined) {
        // A relayed 4xx (404: the session is gone, 429: slow down) is a signal the client acts on by
        // its status: that is kept, with Retry-After and the like; the body the node cannot read goes.
        ctx.deps.logger.warn({ toolServer: server.name, status, reason: unreadable.message }, 'relayed the tool server\'s status without its body, which the node cannot read');
        delete headers['content-type'];
        bytes = Buffer.alloc(0);
      }
      ctx.reply = replyOf(ctx, call, status, headers, contentType, bytes, server.apiKey, failure);
    }
    attempt(failure === undefined ? 'ok' : 'status', status);
    if (failure === undefined) served();
    return undefined;
  },
};

/**
 * The node's stop ended the call (in-flight-requests.ts): ZN_ERR_NODE_STOPPING, to send again only
 * when the tool server never had the whole POST; one it had may have run (afterDelivery's rule: a
 * tool that is not idempotent must not run twice). undefined when the caller left instead.
 */
function stoppedWhile(ctx: PipelineContext, call: McpCall, server: string, sent: boolean): ZenovaError | undefined {
  const reason = ctx.callerGone.reason;
  if (!ctx.callerGone.aborted || !isNodeStopping(reason)) return undefined;
  if (!sent || call.method !== 'POST') return reason;
  return zenovaError(
    'ZN_ERR_NODE_STOPPING',
    `This node is stopping; tool server "${server}" had received the call, which may have run: check its outcome before sending it again.`,
    { retryable: false },
  );
}

/**
 * The error for a call whose connection failed after the tool server had the whole POST (its attempt
 * recorded `error`, not `connect`): it reached
 * the tool server, which may have run it, so it is no "could not be reached" and must not be resent
 * on the SDKs' own rule (x-should-retry: false): a retry would run a tool that is not idempotent
 * twice. A timeout keeps its code (504), not retryable either; an answer over the size bound keeps
 * its own (already not retryable); GET and DELETE, which run no tool, keep theirs.
 */
function afterDelivery(call: McpCall, server: string, error: ZenovaError): ZenovaError {
  if (call.method !== 'POST' || error.code === 'ZN_ERR_UPSTREAM_ERROR') return error;
  if (error.code === 'ZN_ERR_UPSTREAM_TIMEOUT') {
    // The tool may still be running (in JSON answer mode the headers come only once it ran).
    return zenovaError(
      'ZN_ERR_UPSTREAM_TIMEOUT',
      `Tool server "${server}" received the call but did not answer in time; the call may still be running there: check its outcome before sending it again.`,
      { retryable: false, cause: error.cause ?? error },
    );
  }
  return zenovaError(
    'ZN_ERR_UPSTREAM_UNAVAILABLE',
    `Tool server "${server}" closed the connection after receiving the call, which may have run: check its outcome before sending it again.`,
    { retryable: false, cause: error.cause ?? error },
  );
}

/**
 * The POSTed body the node checks and masks, and the caller's text (ctx.http.bodyText) when that
 * text may go on as written: parsed from the text by parseRelayed, so its integers of 16 digits or
 * more are checked as the digits that would be sent. The text is withheld when it holds strings the
 * parse dropped (a duplicate key: JSON.parse keeps the last value, which guardrails checked and
 * feeCount counted; a server keeping the first would run something else).
 */
function callerCopy(ctx: PipelineContext): { body: unknown; text?: string } {
  const received = ctx.http.bodyText;
  if (received !== undefined && ctx.body !== undefined) {
    // The parser skipped a byte order mark; a tool server's may not.
    const text = received.charCodeAt(0) === 0xfeff ? received.slice(1) : received;
    try {
      const { value, relayable } = parseRelayed(text);
      return relayable ? { body: value, text } : { body: value };
    } catch {
      // Not the text the body was parsed from: the body re-serialised goes.
    }
  }
  return { body: ctx.body === undefined ? undefined : structuredClone(ctx.body) };
}

/**
 * The POST's body for the tool server: the caller's text as received, so the protocol goes on
 * unchanged (integers past 2^53, numbers as written), unless an input mask rewrote the payload or
 * the text cannot go as written (callerCopy). Then it is the payload re-serialised: what was checked
 * and counted is what goes (an integer past 2^53 as the number it was: stringifyAsWritten).
 */
function sentBody(ctx: PipelineContext, call: McpCall, payload: JsonRpcPost): string {
  // The record keeps the text that went: re-serialised, the same text (JSON.stringify would write an
  // integer past 2^53 as a string of its digits).
  const text = call.text !== undefined && call.masked?.dirty !== true ? call.text : stringifyAsWritten(payload);
  recordRequestBodyText(ctx, text);
  return text;
}

const REDACTED_SECRET = '[redacted]';
/**
 * `text` with every occurrence of the key replaced, and a piece of it of minSecretPiece or more
 * where `text` ends with the key's start, starts with its end, or is all of it a middle part of
 * the key. A tool server that streams its output in events (log or progress notifications, a
 * result's items) may cut the key across two or more, and the caller, who gets them all, joins
 * them. The cuts fall between events, never inside one: an event is redacted once whole
 * (withoutSecretEvents), and its JSON data cannot cut a string across `data:` lines (a raw line
 * break is not JSON), so the first piece ends a string, the last starts one, and each piece between
 * them is a whole string (data that is not JSON: a data line's ends, or a whole data line). The
 * node cannot hold an event back until the next one comes (a server request in it waits for the
 * client's answer), so each piece is redacted in its own event, whatever the number of cuts;
 * shorter pieces pass (minSecretPiece: half the key, so that redaction tells a caller nothing). The key and its pieces are also found escaped in the text (decodeEscapesOf).
 */
function withoutSecretText(text: string, secret: string): string {
  if (text.length < MIN_SECRET_CHARS) return text.includes(secret) ? text.replaceAll(secret, REDACTED_SECRET) : text;
  const ranges = secretRanges(text, secret);
  // The key or its pieces escaped inside the string: an HTML page or a JSON text carried as a
  // string, whose escapes JSON.parse did not decode (`&#x2F;`, `\/`). Only escapes that write
  // one of the key's characters are read, so a stray `\` or `&` next to a piece stays as written.
  if (text.includes('\\') || text.includes('&')) {
    // The whole key in every form, each escape read both ways: a stray `&` before a key starting
    // `sol;…`, or a `\u0026` the key needs before its `#35;`, would lead decoding astray.
    for (const m of text.matchAll(secretFormsOf(secret))) ranges.push([m.index, m.index + m[0].length]);
    const decoded = decodeEscapesOf(text, prefilterOf(secret).escaped);
    if (decoded !== undefined) for (const [from, to] of secretRanges(decoded.text, secret)) ranges.push([decoded.starts[from]!, decoded.starts[to]!]);
  }
  if (ranges.length === 0) return text;
  ranges.sort((a, b) => a[0] - b[0]);
  let out = '';
  let kept = 0;
  for (const [from, to] of ranges) {
    if (to <= kept) continue;
    // Overlapping ranges (a whole key found both as written and decoded, a piece both at a start and an end) are one.
    if (from >= kept) out += text.slice(kept, from) + REDACTED_SECRET;
    kept = to;
  }
  return out + text.slice(kept);
}

/**
 * An escape the cut between two events split, its start ending a string: `&`, `&#x2`, `&so`, `\`,
 * `\u00`, `\u0026#4`.
 */
const ESCAPE_START_AT_END = /(?:(?:&|\\u0026)(?:#[xX]?[0-9A-Fa-f]{0,8}|[A-Za-z]{1,17})?|\\(?:u[0-9A-Fa-f]{0,3})?)$/;
/** The rest of such an escape starting the next string: `F;`, `x2F;`, `ol;`, `2F`, `u002F`. */
const ESCAPE_END_AT_START = /^(?:#?[xX]?[0-9A-Za-z]{0,17};|u?[0-9A-Fa-f]{1,4})/;

/**
 * The shortest piece of the key redacted: about half the key (at least MIN_SECRET_CHARS). Whether
 * a string comes back redacted says whether it is a piece of the key, and a caller with a tool
 * that repeats its input (an echo, a note it reads back, a model asked to write it) chooses the
 * strings: with short pieces it could confirm the key's first characters past a known prefix
 * (`sk-proj-`) in one call and the rest one character per call. A piece of half the key is as hard
 * to guess as half the key. A key cut once still loses its longer piece (a cut inside an escape
 * leaves the escaped character to neither side, hence half of the key less one character); cut
 * into three or more pieces shorter than that, it passes.
 */
export function minSecretPiece(secret: string): number {
  return Math.max(MIN_SECRET_CHARS, Math.floor((secret.length - 1) / 2));
}

/**
 * The relayed headers but one holding the node's key for the tool server, in any form or a piece
 * of minSecretPiece or more: a header value is not cut into events, so it is dropped whole rather
 * than redacted (a session id or content type with `[redacted]` in it would mislead the client).
 */
function withoutSecretHeaders(ctx: PipelineContext, server: ToolServer, headers: Record<string, string>): Record<string, string> {
  const secret = server.apiKey;
  if (secret === null) return headers;
  for (const [name, value] of Object.entries(headers)) {
    if (!holdsSecretPiece(value, secret)) continue;
    delete headers[name];
    ctx.deps.logger.warn({ toolServer: server.name, header: name }, "the tool server returned the node's key for it in a header; the header is not relayed");
  }
  return headers;
}

function holdsSecretPiece(value: string, secret: string): boolean {
  const piece = minSecretPiece(secret);
  if (value.length < Math.min(piece, secret.length)) return false;
  if (value.match(secretFormsOf(secret)) !== null) return true;
  for (let at = 0; at + piece <= secret.length; at += 1) if (value.includes(secret.slice(at, at + piece))) return true;
  return false;
}

/**
 * Where `text` holds the key (each occurrence), ends with its start, starts with its end, or is all
 * of it a middle part of it: pieces of minSecretPiece or more, outside the whole keys. A cut may
 * split an escape of one of the key's characters (`&#x2` | `F;`): a piece is also found before an
 * escape's start at the text's end, after an escape's rest at its start, and between the two, and
 * what is left of the escape goes with it.
 */
function secretRanges(text: string, secret: string): Array<[number, number]> {
  const ranges: Array<[number, number]> = [];
  for (let at = text.indexOf(secret); at >= 0; at = text.indexOf(secret, at + secret.length)) ranges.push([at, at + secret.length]);
  const minPiece = minSecretPiece(secret);
  if (text.length < minPiece) return ranges;
  const startOfEscape = ESCAPE_START_AT_END.exec(text);
  const restOfEscape = ESCAPE_END_AT_START.exec(text);
  // The text without an escape's start at its end or its rest at its start: where a piece ends or starts.
  const ends = startOfEscape === null || startOfEscape[0].length === 0 ? [text.length] : [text.length, startOfEscape.index];
  const starts = restOfEscape === null || restOfEscape[0].length === 0 ? [0] : [0, restOfEscape[0].length];
  // A piece between two cuts: a string that is nothing but a part of the key.
  if (ranges.length === 0) {
    for (const from of starts) {
      for (const to of ends) {
        if (to - from >= minPiece && secret.includes(text.slice(from, to))) return [[0, text.length]];
      }
    }
  }
  const afterWhole = ranges.length === 0 ? 0 : ranges.at(-1)![1];
  const beforeWhole = ranges.length === 0 ? text.length : ranges[0]![0];
  // Each piece ends (or starts) with MIN_SECRET_CHARS characters of the key: one search rules most texts out.
  endPieces: for (const end of ends) {
    if (end - afterWhole < minPiece || !secret.includes(text.slice(end - MIN_SECRET_CHARS, end))) continue;
    for (let length = Math.min(secret.length - 1, end - afterWhole); length >= minPiece; length -= 1) {
      if (text.startsWith(secret.slice(0, length), end - length)) {
        ranges.push([end - length, text.length]);
        break endPieces;
      }
    }
  }
  startPieces: for (const start of starts) {
    if (beforeWhole - start < minPiece || !secret.includes(text.slice(start, start + MIN_SECRET_CHARS))) continue;
    for (let length = Math.min(secret.length - 1, beforeWhole - start); length >= minPiece; length -= 1) {
      if (text.startsWith(secret.slice(-length), start)) {
        ranges.push([0, start + length]);
        break startPieces;
      }
    }
  }
  return ranges;
}

/**
 * The answer with every occurrence of the node's key for the tool server replaced: a tool server
 * (or a proxy's debug page in front of it) that repeats its request headers in a body, a 400's
 * above all, must not hand that key to a caller; the bundle carries it so that callers never see it.
 * For a body that is not JSON (a JSON answer is redacted in its parsed strings: redactSecret), in
 * every form an error page may write it: as written, with each character other than a letter or
 * digit JSON-escaped (`\"`, `\\`, `\/`, `\u0026` or `\u003C`, mixed as any encoder mixes them) or
 * HTML-escaped (`&amp;`, `&#38;`, `&#x26;`, `&sol;`, `\u0026#43;`: secret-forms.ts). An event stream is
 * redacted event by event (withoutSecretEvents).
 */
export function withoutSecret(bytes: Buffer, secret: string | null): Buffer {
  if (secret === null || secret.length < MIN_SECRET_CHARS || !prefilterOf(secret).mayHold(bytes)) return bytes;
  // One character per byte: the key's UTF-8 and each escape are matched without decoding the body.
  const text = bytes.toString('latin1');
  const out = text.replace(secretFormsOf(secret), REDACTED_SECRET);
  return out === text ? bytes : Buffer.from(out, 'latin1');
}

/**
 * The node's key for the tool server replaced in every string value and object key of a parsed
 * JSON answer at `box[0]` (JSON.parse decoded whatever escapes it was written with; those in a
 * string's own text are read by withoutSecretText), and its pieces at their ends. Returns
 * whether it was found: the answer is then sent re-serialised, not as written.
 */
function redactSecret(box: [unknown], bytes: Buffer, secret: string | null): boolean {
  if (secret === null || secret.length < MIN_SECRET_CHARS || !prefilterOf(secret).mayHold(bytes)) return false;
  let found = false;
  const pending: Array<[Record<string | number, unknown>, string | number]> = [[box as unknown as Record<number, unknown>, 0]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [holder, key] = next;
    const value = holder[key];
    if (typeof value === 'string') {
      const redacted = withoutSecretText(value, secret);
      if (redacted !== value) {
        setOwn(holder, key, redacted);
        found = true;
      }
    } else if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i += 1) pending.push([value as unknown as Record<number, unknown>, i]);
    } else if (isRecord(value)) {
      let object = value;
      if (Object.keys(object).some((name) => withoutSecretText(name, secret) !== name)) {
        // Rebuilt with the same order of keys.
        const renamed: Record<string, unknown> = {};
        for (const name of Object.keys(object)) setOwn(renamed, withoutSecretText(name, secret), object[name]);
        setOwn(holder, key, renamed);
        object = renamed;
        found = true;
      }
      for (const name of Object.keys(object)) pending.push([object, name]);
    }
  }
  return found;
}

/**
 * `source` (an event stream's bytes) with the node's key for the tool server redacted in each event,
 * as in an answer that is not a stream: each event is cut at its blank line (EventBoundaries) and
 * checked whole, so every event goes out only once complete (as SSE clients read it anyway); one
 * longer than `maxEventBytes` fails the stream (ZN_ERR_UPSTREAM_ERROR), as a guarded or held one
 * does. The whole events of a chunk are searched at once (prefilterOf), so a stream without the
 * key costs a few searches per chunk and goes on byte for byte. A key cut across two or more events
 * loses its pieces in each (withoutSecretText).
 */
export async function* withoutSecretEvents(source: AsyncIterable<Uint8Array>, secret: string | null, maxEventBytes: number): AsyncGenerator<Uint8Array> {
  if (secret === null || secret.length < MIN_SECRET_CHARS) {
    yield* source;
    return;
  }
  const boundaries = new EventBoundaries();
  let partial: Buffer[] = [];
  let partialBytes = 0;
  for await (const chunk of source) {
    const bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    const ends = boundaries.scan(bytes);
    const whole = ends.length === 0 ? 0 : ends[ends.length - 1]!;
    if (whole > 0) {
      // The whole events so far: the buffered start of the first, then this chunk up to the last boundary.
      const events = partial.length === 0 ? bytes.subarray(0, whole) : Buffer.concat([...partial, bytes.subarray(0, whole)]);
      if (prefilterOf(secret).mayHold(events)) {
        const redacted: Buffer[] = [];
        let from = 0;
        for (const end of ends) {
          redacted.push(withoutSecretEvent(events.subarray(from, partialBytes + end), secret));
          from = partialBytes + end;
        }
        yield Buffer.concat(redacted);
      } else {
        yield events;
      }
      partial = [];
      partialBytes = 0;
    }
    if (whole < bytes.length) {
      partial.push(bytes.subarray(whole));
      partialBytes += bytes.length - whole;
      if (partialBytes > maxEventBytes) throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `The tool server sent an event longer than ${maxEventBytes} bytes.`);
    }
  }
  // A last event without its blank line.
  if (partial.length > 0) yield withoutSecretEvent(Buffer.concat(partial), secret);
}

const LINE_END = /(\r\n|\r|\n)/;

/**
 * One event (its lines and the blank line ending it) with the key redacted: in the parsed strings
 * of JSON data (redactSecret), the data then re-serialised as one `data:` line where the first was,
 * its other lines (`event:`, `id:`, `retry:`) and line ends kept; in every escaped form of the text
 * (withoutSecret) for data that is not JSON, and its pieces at each data line's ends (or a whole
 * line of one). The same bytes when the key is not in it.
 */
function withoutSecretEvent(event: Buffer, secret: string): Buffer {
  if (!prefilterOf(secret).mayHold(event)) return event;
  // Lines and their ends, alternating (split with a capturing group).
  const parts = event.toString('utf8').split(LINE_END);
  const dataLines: number[] = [];
  const values: string[] = [];
  for (let i = 0; i < parts.length; i += 2) {
    const line = parts[i]!;
    if (line !== 'data' && !line.startsWith('data:')) continue;
    dataLines.push(i);
    const value = line.slice(5);
    values.push(value.startsWith(' ') ? value.slice(1) : value);
  }
  let box: [unknown] | undefined;
  try {
    // As the JSON answers are parsed (parseRelayed): an integer past 2^53 keeps its digits.
    box = dataLines.length === 0 ? undefined : [parseRelayed(values.join('\n')).value];
  } catch {
    box = undefined;
  }
  if (box === undefined) return withoutSecretDataLines(withoutSecret(event, secret), secret);
  // The event's other lines (`id:`, `event:`, comments) are searched too: a proxy's debug comment
  // may carry the key beside clean JSON data.
  let otherLines = false;
  for (let i = 0; i < parts.length; i += 2) {
    const line = parts[i]!;
    if (line === 'data' || line.startsWith('data:') || line.length === 0) continue;
    const redacted = withoutSecret(Buffer.from(line, 'utf8'), secret).toString('utf8');
    if (redacted !== line) {
      parts[i] = redacted;
      otherLines = true;
    }
  }
  const dataRedacted = redactSecret(box, event, secret);
  if (!dataRedacted && !otherLines) return event;
  if (dataRedacted) {
    parts[dataLines[0]!] = `data: ${stringifyAsWritten(box[0])}`;
    // The other data lines go, each with its line end.
    for (const i of dataLines.slice(1)) parts[i] = parts[i - 1] = '';
  }
  return Buffer.from(parts.join(''), 'utf8');
}

/**
 * An event whose data is not JSON with the key's pieces redacted at each data line's ends, or as
 * the whole line (withoutSecretText), byte for byte otherwise: matched on a latin1 view, one character per byte.
 */
function withoutSecretDataLines(event: Buffer, secret: string): Buffer {
  const parts = event.toString('latin1').split(LINE_END);
  const secretBytes = Buffer.from(secret, 'utf8').toString('latin1');
  let changed = false;
  for (let i = 0; i < parts.length; i += 2) {
    const line = parts[i]!;
    if (!line.startsWith('data:')) continue;
    const field = line.startsWith('data: ') ? 6 : 5;
    const value = withoutSecretText(line.slice(field), secretBytes);
    if (value === line.slice(field)) continue;
    parts[i] = line.slice(0, field) + value;
    changed = true;
  }
  return changed ? Buffer.from(parts.join(''), 'latin1') : event;
}

/** defineProperty: an own "__proto__" key from JSON.parse stays a plain property. */
function setOwn(holder: Record<string | number, unknown>, key: string | number, value: unknown): void {
  Object.defineProperty(holder, key, { value, writable: true, enumerable: true, configurable: true });
}

/**
 * A JSON answer parsed as parseRelayed does (integers of 16 digits or more checked as their digits),
 * with its text as the tool server wrote it (UTF-8 decoded, a byte order mark dropped), the text
 * undefined when it holds strings the parse dropped (a duplicate key): what was checked is sent.
 * Undefined for a body that is not JSON (NaN and Infinity, which Python writes, are read as null).
 */
function parseAnswer(bytes: Buffer): { value: unknown; text: string | undefined } | undefined {
  const bom = bytes.length >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf;
  const text = (bom ? bytes.subarray(3) : bytes).toString('utf8');
  try {
    const { value, relayable } = parseRelayed(text);
    return { value, text: relayable ? text : undefined };
  } catch {
    return undefined;
  }
}

/**
 * Why a tool server's answer cannot be relayed, or undefined. A body compressed despite the node's
 * `accept-encoding: identity` could not have the node's key redacted nor be checked by guardrails,
 * and would reach the caller unlabelled (Content-Encoding is not returned); JSON or an event stream
 * declared in a charset other than UTF-8 would be misread as UTF-8 and relayed under a label it no
 * longer matches. (Another body's charset is judged once it is read: unreadableBodyError.)
 */
function unrelayableAnswerError(server: string, headers: Dispatcher.ResponseData['headers'], contentType: string, status: number): ZenovaError | undefined {
  const encoded = unaskedEncodingError(server, headers['content-encoding']);
  if (encoded !== undefined) return encoded;
  // A 4xx's body is judged once read, where its status can be kept (unreadableBodyError).
  const checkedNow = (contentType.startsWith('application/json') && status < 300) || contentType.startsWith('text/event-stream');
  const charset = checkedNow ? unreadableCharset(contentType) : undefined;
  return charset === undefined ? undefined : charsetError(server, charset);
}

function charsetError(server: string, charset: string): ZenovaError {
  return zenovaError('ZN_ERR_UPSTREAM_ERROR', `Tool server "${server}" answered in charset ${JSON.stringify(charset.slice(0, 40))}; the node reads answers as UTF-8 only (charset=utf-8, us-ascii, or no charset).`);
}

/**
 * Why a non-empty body that is neither JSON nor an event stream (an error page) cannot be relayed:
 * declared in a charset other than UTF-8, or starting with a UTF-16 or UTF-32 byte order mark. The
 * node looks for its key in the body's UTF-8 forms and its guardrails read UTF-8, so a UTF-16 page
 * echoing `Authorization: Bearer <key>` reached the caller with the key, and its text unchecked.
 * An empty body (a 202 to a notification) has nothing to misread, whatever its label.
 */
function unreadableBodyError(server: string, contentType: string, body: Buffer): ZenovaError | undefined {
  if (body.length === 0) return undefined;
  const utf16Or32 = (body[0] === 0xff && body[1] === 0xfe) || (body[0] === 0xfe && body[1] === 0xff) || (body[0] === 0 && body[1] === 0 && body[2] === 0xfe && body[3] === 0xff);
  if (utf16Or32) return zenovaError('ZN_ERR_UPSTREAM_ERROR', `Tool server "${server}" answered a body in UTF-16 or UTF-32 (it starts with that byte order mark); the node reads answers as UTF-8 only.`);
  const charset = unreadableCharset(contentType);
  if (charset === undefined) return undefined;
  // A charset that writes ASCII as ASCII (ISO-8859-1, windows-1252: a servlet's default error page)
  // holding only text that reads the same as UTF-8 is read as it is; UTF-16/32 (ASCII with NULs in
  // between, still valid UTF-8 byte for byte) and text that is not UTF-8 are not.
  if (!ASCII_INCOMPATIBLE_CHARSET.test(charset) && isUtf8(body)) return undefined;
  return charsetError(server, charset);
}

/** Charsets whose bytes for ASCII text are not that text's ASCII bytes. */
const ASCII_INCOMPATIBLE_CHARSET = /^(?:utf-?(?:16|32|7)|ucs-?[24]|unicode|ibm|cp0|cp1[01]\d\d|ebcdic)/;

/** A redirect is not followed (nor passed on: the caller would leave the node): the tool server's URL is wrong. */
function redirectError(server: string, status: number): ZenovaError {
  return zenovaError('ZN_ERR_UPSTREAM_ERROR', `Tool server "${server}" answered HTTP ${status}, a redirect, which the node does not follow: its URL in the node's config should be the MCP endpoint itself.`);
}

/** A DELETE for a session the tool server opened but the node could not bind; best effort, not awaited. */
function endUnrecordedSession(ctx: PipelineContext, server: ToolServer, sessionId: string): void {
  const version = ctx.http.headers['mcp-protocol-version'];
  const callerHeaders = { 'mcp-session-id': sessionId, ...(typeof version === 'string' ? { 'mcp-protocol-version': version } : {}) };
  callToolServer(server, { method: 'DELETE', callerHeaders, requestId: ctx.requestId, signal: new AbortSwitch() }).then(
    (answer) => answer.body.dump().catch(() => undefined),
    (err: unknown) => ctx.deps.logger.warn({ toolServer: server.name, err: (err as Error).message }, 'could not end a session the node did not record at the tool server; it stays open there until it expires'),
  );
}

/**
 * At the request's end: the session this initialize bound, when the answer carrying its id never
 * went out (an output guardrail's block, an answer the node cannot relay or read, its caller gone,
 * the node's stop closing its connection first): nobody was given the id, so its binding is dropped and the session
 * ended at the tool server (as one the node could not bind). Not once the answer's head went out.
 */
function unbindIfUnsent(ctx: PipelineContext, server: string, sessionId: string, keyId: string, madeAt: number): void {
  ctx.cleanups.push(() => {
    const dropped = ctx.deps.sessionOwners.openedAnswerEnded(server, sessionId, keyId, madeAt, ctx.replyHeadSent === true);
    if (dropped && ctx.toolServer !== undefined) endUnrecordedSession(ctx, ctx.toolServer, sessionId);
  });
}

/**
 * Binds a session to the key whose initialize opened it; forgets one that ended. Returns the code to
 * refuse the call with when the session an initialize opened cannot be bound to its caller.
 */
function noteSession(ctx: PipelineContext, call: McpCall, status: number, returned: string | undefined): ErrorCode | undefined {
  const server = ctx.toolServer?.name;
  if (server === undefined) return undefined;
  const owners = ctx.deps.sessionOwners;
  const opens = call.payload !== undefined && (Array.isArray(call.payload) ? call.payload : [call.payload]).some((m) => 'method' in m && m.method === 'initialize');
  if (opens && status < 300 && returned !== undefined && returned.length <= 1024 && ctx.key !== undefined) {
    const bound = owners.bindOpened(server, returned, ctx.key.id);
    if (bound.outcome === 'taken') {
      ctx.deps.logger.warn({ toolServer: server, keyId: ctx.key.id }, 'the tool server opened a session with an id another key holds; it is not handed out');
      return 'ZN_ERR_TOOL_SESSION_CONFLICT';
    }
    if (bound.outcome === 'failed') return 'ZN_ERR_TOOL_SESSION_UNAVAILABLE';
    if (bound.madeAt !== undefined) unbindIfUnsent(ctx, server, returned, ctx.key.id, bound.madeAt);
  }
  const sent = sessionIdOf(ctx);
  if (sent === undefined) return undefined;
  if (status === 404 || (call.method === 'DELETE' && status < 300)) owners.forget(server, sent);
  return undefined;
}

/**
 * A JSON answer as a json reply (output guardrails read every string of each message, or of JSON
 * that is not one; the runner records the texts after them), anything else as its bytes.
 */
function replyOf(
  ctx: PipelineContext, call: McpCall, status: number, headers: Record<string, string>, contentType: string, received: Buffer, secret: string | null, failure: ErrorCode | undefined,
): UpstreamReply {
  const answer = contentType.startsWith('application/json') && received.length > 0 ? parseAnswer(received) : undefined;
  if (answer !== undefined) {
    // Any JSON, a JSON-RPC message or not (a `{"detail": …}` error body, a bare string): a bare
    // value is boxed, so a mask can replace it.
    const box: [unknown] = [answer.value];
    // Dirty once the key's redaction or an output mask rewrote the answer: only then is it
    // re-serialised (numbers in JavaScript's form, but integers past 2^53 as written: stringifyAsWritten).
    const rewritten: DirtyMark = { dirty: redactSecret(box, received, secret) };
    const texts = jsonTexts(box, rewritten);
    const value = box[0];
    const body = typeof value === 'object' && value !== null ? value : new BoxedJson(box);
    return { kind: 'json', status, headers, body, texts, failure, asWritten: () => (rewritten.dirty ? stringifyAsWritten(box[0]) : answer.text) };
  }
  const bytes = withoutSecret(received, secret);
  if (bytes.length > 0) call.rawBody = bytes;
  replaceResponseText(ctx, bytes.toString('utf8'), MAX_RESPONSE_TEXT_CHARS);
  return { kind: 'raw', status, headers, body: oneChunk(bytes), failure };
}

/**
 * Output guardrails over a relayed answer (guardrails-out calls this for the mcp API): an event
 * stream is checked event by event as it is delivered (mcp-event-guard.ts); another non-empty body
 * is checked whole now, before anything is sent. The caller checked `policy` is the key's.
 */
export function guardMcpOutput(ctx: PipelineContext, policy: CompiledPolicy): StageResult {
  const reply = ctx.reply;
  const call = calls.get(ctx);
  if (reply?.kind !== 'raw' || call === undefined) return undefined;
  const side = policy.output;
  const stream = (reply.headers['content-type'] ?? '').toLowerCase().startsWith('text/event-stream');
  if (!stream && call.rawBody === undefined) return undefined;
  if (side.broken !== null) {
    // Nothing is delivered, so nothing of the unchecked body is kept (nor counted) either.
    replaceResponseText(ctx, '', MAX_RESPONSE_TEXT_CHARS);
    return reject('ZN_ERR_GUARDRAIL_BLOCKED', side.broken.message);
  }
  if (side.rules.length === 0) return undefined;
  if (!stream) return guardRawBody(ctx, policy, reply, call.rawBody!);
  call.guarded = true;
  const byRule = new Map<number, GuardrailVerdict>();
  reply.body = holdAnswer(ctx, call, reply.status, guardEventStream(call.source ?? reply.body, {
    check: (slots) => {
      if (isPartial(slots)) return reject('ZN_ERR_GUARDRAIL_BLOCKED', uncheckedTextMessage(policy.id, 'output'));
      const before = ctx.guardrails.length;
      const rejection = applyPolicy(ctx, policy, 'output', slots);
      mergeVerdicts(ctx.guardrails, before, byRule);
      return rejection;
    },
    pending: requestIds(call.payload),
    // The relay delivers what the guard yields; the outcome is the guard's refusal (as a stopped model stream's is).
    blocked: (rejection) => {
      ctx.outcome = { status: 'rejected', httpStatus: reply.status, errorCode: rejection.error.code };
    },
    keep: (slots) => keepTexts(ctx, slots),
  }, MAX_GUARDED_EVENT_CHARS));
  return undefined;
}

/**
 * A POST's event stream with the event completing it marked to be held, and what follows it bounded
 * (mcp-answer-hold.ts), and a failure before it answering each request still pending with the
 * node's error (mcp-stream-failure.ts); a GET's as is.
 */
function holdAnswer(ctx: PipelineContext, call: McpCall, status: number, body: AsyncIterable<Uint8Array>): AsyncIterable<Uint8Array> {
  if (call.method !== 'POST') return body;
  const after = { graceMs: AFTER_ANSWER_GRACE_MS, maxBytes: MAX_AFTER_ANSWER_BYTES, close: () => call.closeSource?.() };
  // One set: the hold removes the ids it delivers answers for, so a failure answers only the rest.
  const pending = requestIds(call.payload);
  return answerPendingOnFailure(holdCompletingEvent(body, pending, MAX_JSON_ANSWER_BYTES, after), {
    pending,
    failed: (err) => {
      // The node's stop ended the stream (in-flight-requests.ts): its requests are answered with
      // that, as with a failure; a caller that left is owed nothing.
      const stopping = stoppedWhile(ctx, call, ctx.toolServer?.name ?? 'tool server', true);
      if (stopping === undefined && isAbort(err, ctx.callerGone)) return undefined;
      const error = stopping ?? classifyUpstreamFailure(err, ctx.toolServer?.name ?? 'tool server');
      // The stream ends normally, so the runner sees no failure: the record's outcome is set here.
      ctx.outcome = { status: 'failed', httpStatus: status, errorCode: error.code };
      ctx.deps.logger.warn(
        { requestId: ctx.requestId, code: error.code, reason: error.logMessage },
        stopping === undefined ? 'tool server event stream failed; its pending requests were answered with the error' : 'the node is stopping; the event stream\'s pending requests were answered with that',
      );
      return error;
    },
  });
}

/**
 * A body that is neither JSON nor an event stream, checked whole as one text. Only a text body
 * (text/*, *json*, *xml* content type, valid UTF-8) can be rewritten: one that is not and that a
 * mask matched is blocked, since re-encoding its decoded text would corrupt every byte that is
 * not UTF-8. A body labelled JSON that did not parse is checked as written and then again with its
 * JSON escapes decoded (`\u673a` for `机`): a match only in the decoded text blocks it, since a mask
 * would have to send that text, changing every escape-like sequence (`C:\new`) in it.
 */
function guardRawBody(ctx: PipelineContext, policy: CompiledPolicy, reply: Extract<UpstreamReply, { kind: 'raw' }>, bytes: Buffer): StageResult {
  const contentType = reply.headers['content-type'] ?? '';
  const decoded = decodeText(bytes, contentType);
  const slot = { text: decoded.text };
  const blocked = applyPolicy(ctx, policy, 'output', [slot]) ?? (contentType.toLowerCase().includes('json') ? matchedOnlyDecoded(ctx, policy, slot.text) : undefined);
  if (blocked !== undefined) {
    // A block delivers nothing, so nothing is recorded.
    replaceResponseText(ctx, '', MAX_RESPONSE_TEXT_CHARS);
    return blocked;
  }
  const masked = slot.text !== decoded.text;
  if (masked && !decoded.rewritable) {
    replaceResponseText(ctx, '', MAX_RESPONSE_TEXT_CHARS);
    return reject('ZN_ERR_GUARDRAIL_BLOCKED', `Blocked by guardrail policy "${policy.id}": a mask matched a tool server answer that is not text, which cannot be rewritten.`);
  }
  // What is delivered is recorded: masked, or as it came.
  replaceResponseText(ctx, slot.text, MAX_RESPONSE_TEXT_CHARS);
  if (masked) reply.body = oneChunk(Buffer.from(slot.text, 'utf8'));
  return undefined;
}

/**
 * The rejection for a body whose text to send (`text`, masked) matches an output rule only with
 * its JSON escapes decoded: the block rule's own, or one for a mask, which could only send the
 * decoded text.
 */
function matchedOnlyDecoded(ctx: PipelineContext, policy: CompiledPolicy, text: string): StageResult {
  const decodedText = withJsonEscapesDecoded(text);
  if (decodedText === text) return undefined;
  const slot = { text: decodedText };
  const blocked = applyPolicy(ctx, policy, 'output', [slot]);
  if (blocked !== undefined || slot.text === decodedText) return blocked;
  return reject('ZN_ERR_GUARDRAIL_BLOCKED', `Blocked by guardrail policy "${policy.id}": a mask matched a tool server answer only with its JSON escapes decoded, and the answer cannot be rewritten as written.`);
}

const TEXT_CONTENT_TYPE = /^text\/|json|xml/;
const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The body as text, and whether writing that text back as UTF-8 gives the same body where unmasked. */
function decodeText(bytes: Buffer, contentType: string): { text: string; rewritable: boolean } {
  if (TEXT_CONTENT_TYPE.test(contentType.toLowerCase())) {
    try {
      return { text: strictUtf8.decode(bytes), rewritable: true };
    } catch {
      // Not UTF-8 after all: checked as decoded, never rewritten.
    }
  }
  return { text: bytes.toString('utf8'), rewritable: false };
}

/** Verdicts pushed since `from` folded into the stream's one verdict per rule (a long GET stream stays bounded). */
function mergeVerdicts(verdicts: GuardrailVerdict[], from: number, byRule: Map<number, GuardrailVerdict>): void {
  let write = from;
  for (let read = from; read < verdicts.length; read += 1) {
    const verdict = verdicts[read]!;
    const earlier = byRule.get(verdict.rule);
    if (earlier !== undefined) {
      earlier.matches += verdict.matches;
      continue;
    }
    byRule.set(verdict.rule, verdict);
    verdicts[write] = verdict;
    write += 1;
  }
  verdicts.length = write;
}

/** Ids of the requests in a POST, as written (what its event stream owes answers to). */
function requestIds(payload: JsonRpcPost | undefined): Set<JsonRpcId> {
  const ids = new Set<JsonRpcId>();
  for (const m of payload === undefined ? [] : Array.isArray(payload) ? payload : [payload]) {
    const id = isRecord(m) && 'method' in m ? idAsWritten(m) : undefined;
    if (id !== undefined) ids.add(id);
  }
  return ids;
}

function keepTexts(ctx: PipelineContext, slots: readonly TextSlot[]): void {
  for (const slot of slots) keepResponseText(ctx, slot.text, MAX_RESPONSE_TEXT_CHARS);
}

/** A JSON answer that is a bare value, serialised as what its box holds when sent (masked or not). */
class BoxedJson {
  constructor(private readonly box: [unknown]) {}

  toJSON(): unknown {
    return this.box[0];
  }
}

async function* oneChunk(bytes: Buffer): AsyncGenerator<Uint8Array> {
  if (bytes.length > 0) yield bytes;
}

/**
 * The event stream's bytes as they come (unchecked; guardMcpOutput wraps them), the node's key for
 * the tool server redacted in each event (withoutSecretEvents). Its end times the
 * call; a read failure surfaces classified (a POST's pending requests are answered with it:
 * holdAnswer; a GET's stream the runner cuts), the caller's own abort as is, a GET stream a new
 * request of which would now be refused as that refusal (ZN_ERR_API_KEY_REVOKED,
 * ZN_ERR_SURFACE_DISABLED …). A GET stream the node's stop ended just ends, its outcome `failed`
 * with ZN_ERR_NODE_STOPPING, as does one whose key's output guardrails changed (its client reconnects
 * under the new ones), with ZN_ERR_GUARDRAIL_POLICY_CHANGED.
 */
async function* relayStream(
  ctx: PipelineContext, call: McpCall, response: Dispatcher.ResponseData, upstream: string, started: number,
): AsyncGenerator<Uint8Array> {
  const decoder = new TextDecoder();
  // The GET stream's head is relayed by now: a push channel holds no concurrency slot while it waits.
  if (call.method === 'GET') releaseConcurrencySlot(ctx);
  // A GET stream outlives its request's config snapshot: it ends when a new request of it would be
  // refused, or when the node stops (get-stream-standing.ts), its body destroyed with why.
  let stoppedBy: ZenovaError | undefined;
  const untrack = call.method === 'GET'
    ? ctx.deps.getStreams?.track({
      rawHeaders: ctx.http.rawHeaders, requestId: ctx.requestId, server: upstream,
      outputRules: ctx.config === undefined ? '' : outputRulesOf(ctx.config, ctx.key?.guardrailPolicyId ?? null),
    }, (error, how) => {
      if (how !== 'refused') stoppedBy = error;
      response.body.destroy(error);
    })
    : undefined;
  try {
    // Redacted before anything reads it: the caller, the output guard, the hold, the record.
    for await (const chunk of withoutSecretEvents(response.body, ctx.toolServer?.apiKey ?? null, MAX_JSON_ANSWER_BYTES)) {
      // A guarded stream's record gets the text after masking, from the guard.
      if (call.guarded !== true) keepResponseText(ctx, decoder.decode(chunk, { stream: true }), MAX_RESPONSE_TEXT_CHARS);
      yield chunk;
    }
  } catch (err) {
    if (isAbort(err, ctx.callerGone)) throw err;
    if (stoppedBy !== undefined) {
      // Ended cleanly for the caller (a push channel has no answer to cut short); the record says why the node ended it.
      ctx.outcome = { status: 'failed', httpStatus: response.statusCode, errorCode: stoppedBy.code };
      return;
    }
    throw classifyUpstreamFailure(err, upstream);
  } finally {
    untrack?.();
    ctx.upstreamMs = elapsed(ctx, started);
    // A consumer that stops early (caller gone) must not leave the tool server's stream open.
    if (!response.body.destroyed) response.body.destroy();
  }
}
