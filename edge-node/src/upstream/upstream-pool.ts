// One keep-alive undici Pool per upstream origin and connect timeout, shared by every upstream on
// that origin with that timeout and by every config version, with the upstream's key injected on
// the way out. Each call names its upstream as the request's config snapshot has it, so a config
// swap needs no new pool; pools the new config no longer uses are closed (after their in-flight
// calls finish).
import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import type { RuntimeUpstream } from '../config/runtime-config.js';
import { zenovaError } from '../errors.js';
import { classifyUpstreamFailure, isAbort } from './upstream-failure.js';
import { SentNotice } from './sent-notice.js';
import type { AbortSwitch } from '../pipeline/abort-switch.js';

const MAX_CONNECT_TIMEOUT_MS = 10_000;
const KEEP_ALIVE_TIMEOUT_MS = 30_000;
const MAX_CONNECTIONS_PER_POOL = 256;

export interface UpstreamCall {
  method: 'GET' | 'POST';
  /** Relative to the upstream's /v1 base, e.g. `/chat/completions`. */
  path: string;
  /** JSON text; sent as application/json. */
  body?: string;
  accept?: string;
  requestId: string;
  /** Header and between-chunk timeout; the upstream's own when omitted. */
  timeoutMs?: number;
  /** Aborts the call (the caller went away); the abort surfaces as the original abort error. */
  signal: AbortSwitch;
  /** How the upstream secret is sent: `Authorization: Bearer` (default) or Anthropic's `x-api-key`. */
  secretHeader?: 'authorization' | 'x-api-key';
  /** Further headers the provider's API needs (e.g. anthropic-version); never the caller's key. */
  extraHeaders?: Record<string, string>;
  /** Called once the request, body included, is written to the upstream's connection (sent-notice.ts). */
  onSent?: () => void;
}

export type UpstreamResponse = Dispatcher.ResponseData;

/** Base URLs parsed once, not per call (a few µs each); bounded by the config's upstream count. */
const parsedBases = new Map<string, { origin: string; basePath: string }>();
const MAX_PARSED_BASES = 10_000;

function parsedBase(baseUrl: string): { origin: string; basePath: string } {
  let parsed = parsedBases.get(baseUrl);
  if (parsed === undefined) {
    const url = new URL(baseUrl);
    parsed = { origin: url.origin, basePath: url.pathname.replace(/\/+$/, '') };
    if (parsedBases.size >= MAX_PARSED_BASES) parsedBases.clear();
    parsedBases.set(baseUrl, parsed);
  }
  return parsed;
}

function connectTimeoutOf(upstream: RuntimeUpstream): number {
  return Math.min(upstream.timeoutMs, MAX_CONNECT_TIMEOUT_MS);
}

/**
 * `sent`, or the abort of `signal` as soon as it fires. undici acts on an abort only once the
 * request has a connection: while it waits for one (queued behind the pool's cap, or connecting
 * to a host that drops packets or never finishes its TLS handshake) a caller that left, or the
 * attempt's timer, would wait for the connect timeout (up to 10 s), holding the request's
 * concurrency slot and its record. undici still drops the request when it gets its connection.
 */
async function untilAborted(sent: Promise<UpstreamResponse>, signal: AbortSwitch): Promise<UpstreamResponse> {
  if (signal.aborted) {
    sent.then((late) => late.body.on('error', () => undefined).destroy(), () => undefined);
    throw signal.reason;
  }
  let giveUp!: (reason: unknown) => void;
  const abandoned = new Promise<never>((_, rejectAbandoned) => (giveUp = rejectAbandoned));
  const onAbort = (): void => giveUp(signal.reason);
  signal.once('abort', onAbort);
  try {
    return await Promise.race([sent, abandoned]);
  } finally {
    signal.off('abort', onAbort);
    // An answer after the abort (a race with its headers) is nobody's: dropped with its connection.
    if (signal.aborted) sent.then((late) => late.body.on('error', () => undefined).destroy(), () => undefined);
  }
}

export class UpstreamPool {
  /** By origin, then by connect timeout (ms). */
  private readonly pools = new Map<string, Map<number, Pool>>();
  private closing: Promise<void> | undefined;

  /**
   * The pool for `upstream`'s origin with its own connect timeout: a pool's timeout is fixed when it
   * is made, and an abort (the attempt's timer) does not end a connect undici is still waiting on,
   * so upstreams sharing an origin must not share a connect timeout set by whichever came first.
   */
  private poolFor(upstream: RuntimeUpstream, origin: string): Pool {
    const connectTimeoutMs = connectTimeoutOf(upstream);
    let byTimeout = this.pools.get(origin);
    if (byTimeout === undefined) {
      byTimeout = new Map();
      this.pools.set(origin, byTimeout);
    }
    const existing = byTimeout.get(connectTimeoutMs);
    // A pool closed by a swap may still be asked for by a request on the old config: open anew.
    if (existing !== undefined && !existing.closed && !existing.destroyed) return existing;
    const pool = new Pool(origin, {
      connections: MAX_CONNECTIONS_PER_POOL,
      keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
      // rejectUnauthorized stated outright: Node's default follows NODE_TLS_REJECT_UNAUTHORIZED, and
      // a 0 left in the environment would send upstream secrets to whoever answers.
      connect: { timeout: connectTimeoutMs, rejectUnauthorized: true },
    });
    byTimeout.set(connectTimeoutMs, pool);
    return pool;
  }

  /** Closes the pools no upstream of `upstreams` (a new config's) would use; calls in flight on them finish. */
  retainOnly(upstreams: Iterable<RuntimeUpstream>): void {
    const keep = new Map<string, Set<number>>();
    for (const upstream of upstreams) {
      const origin = new URL(upstream.baseUrl).origin;
      let timeouts = keep.get(origin);
      if (timeouts === undefined) keep.set(origin, (timeouts = new Set()));
      timeouts.add(connectTimeoutOf(upstream));
    }
    for (const [origin, byTimeout] of this.pools) {
      const timeouts = keep.get(origin);
      for (const [timeout, pool] of byTimeout) {
        if (timeouts?.has(timeout) === true) continue;
        byTimeout.delete(timeout);
        void pool.close().catch(() => undefined);
      }
      if (byTimeout.size === 0) this.pools.delete(origin);
    }
  }

  /**
   * Sends one call. Resolves with any HTTP status (callers judge it); rejects with
   * ZN_ERR_UPSTREAM_UNAVAILABLE / ZN_ERR_UPSTREAM_TIMEOUT, or with the abort error when
   * `signal` fired. Body read errors later are classified with `classifyUpstreamFailure`.
   */
  async request(upstream: RuntimeUpstream, call: UpstreamCall): Promise<UpstreamResponse> {
    if (this.closing !== undefined) throw zenovaError('ZN_ERR_UPSTREAM_UNAVAILABLE', `Upstream "${upstream.name}" is not called: the node is stopping.`);
    const { origin, basePath } = parsedBase(upstream.baseUrl);
    const pool = this.poolFor(upstream, origin);
    const timeoutMs = call.timeoutMs ?? upstream.timeoutMs;
    // Built here, never from the caller's headers (the caller's accept-encoding stays here too):
    // bodies are read and parsed as sent, so only uncompressed ones are asked for (`identity`).
    const headers: Record<string, string> = {
      ...call.extraHeaders,
      accept: call.accept ?? 'application/json',
      'accept-encoding': 'identity',
      'user-agent': 'zenova-node',
      'x-request-id': call.requestId,
    };
    if (call.body !== undefined) headers['content-type'] = 'application/json';
    // Only the upstream's own key ever goes upstream; the caller's key stays here.
    if (upstream.apiKey !== undefined) {
      if (call.secretHeader === 'x-api-key') headers['x-api-key'] = upstream.apiKey;
      else headers.authorization = `Bearer ${upstream.apiKey}`;
    }
    try {
      const sent = (call.onSent === undefined ? pool : new SentNotice(pool, call.onSent)).request({
        method: call.method,
        path: `${basePath}${call.path}`,
        headers,
        body: call.body ?? null,
        signal: call.signal,
        headersTimeout: timeoutMs,
        // Between two body chunks, so a long stream is fine while a stalled one is not.
        bodyTimeout: timeoutMs,
      });
      return await untilAborted(sent, call.signal);
    } catch (err) {
      if (isAbort(err, call.signal)) throw err;
      throw classifyUpstreamFailure(err, upstream.name);
    }
  }

  /** Closes every pool, letting in-flight calls finish; safe to call more than once. */
  close(): Promise<void> {
    this.closing ??= Promise.all([...this.pools.values()].flatMap((byTimeout) => [...byTimeout.values()].map((pool) => pool.close()))).then(() => undefined);
    return this.closing;
  }
}
