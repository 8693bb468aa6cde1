// One keep-alive undici Pool per upstream origin, shared by every upstream on that origin, with
// the upstream's key injected on the way out. Failures come back as the node's error codes.
import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import { DEFAULT_UPSTREAM_TIMEOUT_MS } from '../config/local-config.js';
import type { UpstreamConfig } from '../config/local-config.js';
import { zenovaError } from '../errors.js';
import { classifyUpstreamFailure, isAbort } from './upstream-failure.js';

const MAX_CONNECT_TIMEOUT_MS = 10_000;
const KEEP_ALIVE_TIMEOUT_MS = 30_000;
const MAX_CONNECTIONS_PER_ORIGIN = 256;

export interface UpstreamCall {
  method: 'GET' | 'POST';
  /** Relative to the upstream's /v1 base, e.g. `/chat/completions`. */
  path: string;
  /** JSON text; sent as application/json. */
  body?: string;
  accept?: string;
  requestId: string;
  /** Aborts the call (the caller went away); the abort surfaces as the original abort error. */
  signal: AbortSignal;
}

export type UpstreamResponse = Dispatcher.ResponseData;

interface Target {
  config: UpstreamConfig;
  pool: Pool;
  basePath: string;
  timeoutMs: number;
}

export class UpstreamPool {
  private readonly targets = new Map<string, Target>();
  private readonly pools = new Map<string, Pool>();
  private closing: Promise<void> | undefined;

  constructor(upstreams: readonly UpstreamConfig[]) {
    for (const config of upstreams) {
      const url = new URL(config.baseUrl);
      const timeoutMs = config.timeoutMs ?? DEFAULT_UPSTREAM_TIMEOUT_MS;
      let pool = this.pools.get(url.origin);
      if (pool === undefined) {
        pool = new Pool(url.origin, {
          connections: MAX_CONNECTIONS_PER_ORIGIN,
          keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
          // The first upstream on an origin sets the connect timeout; header/body timeouts are per call.
          connect: { timeout: Math.min(timeoutMs, MAX_CONNECT_TIMEOUT_MS) },
        });
        this.pools.set(url.origin, pool);
      }
      this.targets.set(config.name, { config, pool, basePath: url.pathname.replace(/\/+$/, ''), timeoutMs });
    }
  }

  has(name: string): boolean {
    return this.targets.has(name);
  }

  /**
   * Sends one call. Resolves with any HTTP status (callers judge it); rejects with
   * ZN_ERR_UPSTREAM_UNAVAILABLE / ZN_ERR_UPSTREAM_TIMEOUT, or with the abort error when
   * `signal` fired. Body read errors later are classified with `classifyUpstreamFailure`.
   */
  async request(name: string, call: UpstreamCall): Promise<UpstreamResponse> {
    const target = this.targets.get(name);
    if (target === undefined) throw zenovaError('ZN_ERR_INTERNAL', `Unknown upstream "${name}".`);
    const headers: Record<string, string> = {
      accept: call.accept ?? 'application/json',
      'user-agent': 'zenova-node',
      'x-request-id': call.requestId,
    };
    if (call.body !== undefined) headers['content-type'] = 'application/json';
    // Only the upstream's own key ever goes upstream; the caller's key stays here.
    if (target.config.apiKey !== undefined) headers.authorization = `Bearer ${target.config.apiKey}`;
    try {
      return await target.pool.request({
        method: call.method,
        path: `${target.basePath}${call.path}`,
        headers,
        body: call.body ?? null,
        signal: call.signal,
        headersTimeout: target.timeoutMs,
        // Between two body chunks, so a long stream is fine while a stalled one is not.
        bodyTimeout: target.timeoutMs,
      });
    } catch (err) {
      if (isAbort(err, call.signal)) throw err;
      throw classifyUpstreamFailure(err, name);
    }
  }

  /** Closes every pool, letting in-flight calls finish; safe to call more than once. */
  close(): Promise<void> {
    this.closing ??= Promise.all([...this.pools.values()].map((pool) => pool.close())).then(() => undefined);
    return this.closing;
  }
}
