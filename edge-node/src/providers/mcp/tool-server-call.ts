/**
 * One HTTP exchange with an MCP tool server (streamable HTTP): the caller's method and MCP headers
 * passed on, the server's own key injected, everything else (the caller's key above all) left
 * behind. undici directly rather than the UpstreamPool: MCP needs DELETE, its own headers, the
 * endpoint URL as is, and an unbounded body for the long-lived GET event stream.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { Agent } from 'undici';
import type { Dispatcher } from 'undici';
import type { ToolServer } from '../../../../proto/src/index.js';
import { zenovaError } from '../../errors.js';
import { AbortSwitch } from '../../pipeline/abort-switch.js';
import { classifyUpstreamFailure, isAbort } from '../../upstream/upstream-failure.js';
import { SentNotice } from '../../upstream/sent-notice.js';

/** Caller headers the tool server needs to follow the MCP session; nothing else is passed on. */
export const FORWARDED_HEADERS = ['accept', 'mcp-session-id', 'mcp-protocol-version', 'last-event-id'] as const;
/** Tool server headers the caller needs back. */
export const RETURNED_HEADERS = ['content-type', 'mcp-session-id', 'mcp-protocol-version', 'cache-control', 'retry-after'] as const;

const MAX_HEADER_CHARS = 1024;
const MAX_CONNECT_TIMEOUT_MS = 10_000;
const DEFAULT_ACCEPT = 'application/json, text/event-stream';

// One keep-alive agent for every tool server's calls (POST, DELETE); idle sockets are unref'd by
// undici, so it never holds the process open. Per-call timeouts come from each server's config.
// rejectUnauthorized stated outright in both: not left to NODE_TLS_REJECT_UNAUTHORIZED (tool server bearers go out on these).
const agent = new Agent({ connections: 256, keepAliveTimeout: 30_000, connect: { timeout: MAX_CONNECT_TIMEOUT_MS, rejectUnauthorized: true } });
// GET event streams keep their socket for as long as they are open (hours): on the capped pool they
// would take every socket of a tool server and calls would queue behind them for ever. They get
// their own agent, without a cap (mcp-call.ts bounds how many each key keeps open).
const streamAgent = new Agent({ keepAliveTimeout: 30_000, connect: { timeout: MAX_CONNECT_TIMEOUT_MS, rejectUnauthorized: true } });

export type ToolServerMethod = 'GET' | 'POST' | 'DELETE';

export interface ToolServerRequest {
  method: ToolServerMethod;
  /** The caller's headers; only FORWARDED_HEADERS are read. */
  callerHeaders: IncomingHttpHeaders;
  /** JSON text (POST). */
  body?: string;
  requestId: string;
  signal: AbortSwitch;
  /**
   * Called once the request, body included, is written to the tool server's connection: from then
   * on the tool server has the call and runs it, answered or not (billing.md, "Tool calls").
   */
  onSent?: () => void;
}

function headerValue(value: string | string[] | undefined): string | undefined {
  const first = Array.isArray(value) ? value[0] : value;
  if (first === undefined || first.length === 0 || first.length > MAX_HEADER_CHARS) return undefined;
  return first;
}

export function toolServerHeaders(server: ToolServer, req: Pick<ToolServerRequest, 'callerHeaders' | 'body' | 'requestId'>): Record<string, string> {
  // Uncompressed answers only (no Accept-Encoding would allow any coding): the node redacts its
  // key from them and checks them as sent, and decompresses nothing (mcp-call.ts refuses one compressed anyway).
  const headers: Record<string, string> = { 'accept-encoding': 'identity', 'user-agent': 'zenova-node', 'x-request-id': req.requestId };
  for (const name of FORWARDED_HEADERS) {
    const value = headerValue(req.callerHeaders[name]);
    if (value !== undefined) headers[name] = value;
  }
  headers.accept ??= DEFAULT_ACCEPT;
  // The body is re-serialised JSON whatever the caller's charset parameters said.
  if (req.body !== undefined) headers['content-type'] = 'application/json';
  // Only the tool server's own key goes out; the caller's key stays on the node.
  if (server.apiKey !== null) headers.authorization = `Bearer ${server.apiKey}`;
  return headers;
}

/** The headers of the tool server's answer the caller gets. */
export function returnedHeaders(headers: Dispatcher.ResponseData['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of RETURNED_HEADERS) {
    const value = headers[name];
    const first = Array.isArray(value) ? value[0] : value;
    if (typeof first === 'string' && first.length <= MAX_HEADER_CHARS) out[name] = first;
  }
  return out;
}

/**
 * Sends the request. Resolves with any status (the caller judges it); rejects with
 * ZN_ERR_UPSTREAM_UNAVAILABLE / _TIMEOUT, or the abort error when `signal` fired. The GET event
 * stream may stay quiet for long, so only its headers are timed; other bodies are timed between chunks.
 * The wait for the headers is bounded by the server's timeoutMs from the call's start, time spent
 * queued for a socket of the pool included (undici's headersTimeout starts only once it is sent).
 */
export async function callToolServer(server: ToolServer, req: ToolServerRequest): Promise<Dispatcher.ResponseData> {
  // undici's own abort of a request still queued for a socket takes effect only once it gets one
  // (it then goes unsent): the caller leaving, or the deadline, ends the wait here at once.
  const signal = new AbortSwitch();
  let abandoned = false;
  let reject!: (err: unknown) => void;
  const stopped = new Promise<never>((_, rejectStopped) => (reject = rejectStopped));
  const stop = (err: unknown): void => {
    abandoned = true;
    reject(err);
  };
  stopped.catch(() => undefined);
  const callerGone = (): void => {
    signal.abort(req.signal.reason);
    stop(req.signal.reason);
  };
  if (req.signal.aborted) callerGone();
  else req.signal.once('abort', callerGone);
  let timedOut = false;
  const deadline = setTimeout(() => {
    timedOut = true;
    signal.abort();
    stop(zenovaError('ZN_ERR_UPSTREAM_TIMEOUT', `Tool server "${server.name}" did not answer in time (no headers within ${server.timeoutMs} ms).`));
  }, server.timeoutMs);
  const pool = req.method === 'GET' ? streamAgent : agent;
  const sent = (req.onSent === undefined ? pool : new SentNotice(pool, req.onSent)).request({
    origin: new URL(server.url).origin,
    path: toolServerPath(server.url),
    method: req.method,
    headers: toolServerHeaders(server, req),
    body: req.body ?? null,
    signal,
    headersTimeout: server.timeoutMs,
    bodyTimeout: req.method === 'GET' ? 0 : server.timeoutMs,
  });
  // An answer that comes after the wait was given up is dropped with its connection.
  sent.then((late) => abandoned && late.body.on('error', () => undefined).destroy(), () => undefined);
  try {
    const response = await Promise.race([sent, stopped]);
    // The caller leaving still ends the body; once it is closed, nothing is left to abort.
    response.body.once('close', () => req.signal.off('abort', callerGone));
    return response;
  } catch (err) {
    req.signal.off('abort', callerGone);
    if (req.signal.aborted) throw err;
    // The deadline's abort is a timeout, not the caller's.
    if (timedOut) throw zenovaError('ZN_ERR_UPSTREAM_TIMEOUT', `Tool server "${server.name}" did not answer in time (no headers within ${server.timeoutMs} ms).`);
    if (isAbort(err, req.signal)) throw err;
    throw classifyUpstreamFailure(err, server.name);
  } finally {
    clearTimeout(deadline);
  }
}

/** The endpoint's path (and query, should an operator's URL carry one) as undici wants it. */
function toolServerPath(url: string): string {
  const parsed = new URL(url);
  return `${parsed.pathname}${parsed.search}`;
}
