/**
 * Open MCP GET event streams end when their key stops standing. A request's key is checked once,
 * when it arrives (stage authenticate), and the request keeps its config snapshot to the end; a GET
 * stream may stay open for hours, so without this a revoked, expired or deleted key (or a
 * suspended or deleted account) would keep receiving the tool server's pushes while its new
 * requests get 401. Each open GET stream is re-checked, with authenticate's own check
 * (findCallerKey + checkKeyStanding), against every new config when it is swapped in, and against
 * the current config every `intervalMs` (30 s) so an expiresAt passing without a swap ends it too.
 * A re-check rather than a cap on a stream's lifetime: healthy streams are never cut. A stream that
 * fails the check is ended with the code authenticate would refuse the key with: its tool server
 * GET is aborted, its record says `failed` with that code, and the caller's response is cut off as
 * any relayed body that fails (the caller's MCP client reconnects and gets the 401).
 */
import type { IncomingHttpHeaders } from 'node:http';
import { checkKeyStanding, findCallerKey } from '../../auth/api-key-verifier.js';
import type { ConfigHolder } from '../../config/config-holder.js';
import type { RuntimeConfig } from '../../config/runtime-config.js';
import { zenovaError } from '../../errors.js';
import type { ErrorCode, ZenovaError } from '../../errors.js';
import type { Logger } from '../../logger.js';

/** How often open GET streams are re-checked without a config swap (for an expiresAt passing). */
export const GET_STREAM_RECHECK_MS = 30_000;

export interface GetStreamStandingOptions {
  /** Re-check period; GET_STREAM_RECHECK_MS by default. */
  intervalMs?: number;
  /** Unix ms for expiresAt; Date.now by default (tests move it by hand). */
  now?: () => number;
}

interface OpenStream {
  /** The request's headers: the presented key is looked up in each new config as authenticate does. */
  readonly headers: IncomingHttpHeaders;
  readonly requestId: string;
  /** Ends the stream (aborts the tool server GET) with why; called at most once. */
  readonly end: (error: ZenovaError) => void;
}

/** Why the caller presenting `headers` would now be refused by authenticate under `config`, or undefined. */
export function standingRefusal(config: RuntimeConfig, headers: IncomingHttpHeaders, now: number): ErrorCode | undefined {
  // A config without keys (stand-alone mode) admits every caller, as authenticate does.
  if (config.apiKeys === null) return undefined;
  const found = findCallerKey(config.apiKeys, headers);
  if (!found.ok) return found.code;
  const standing = checkKeyStanding(config, found.key, now);
  return standing.ok ? undefined : standing.code;
}

/** The open GET streams of one app, re-checked on every config swap and on a timer. */
export class GetStreamStanding {
  private readonly open = new Set<OpenStream>();
  private readonly intervalMs: number;
  private readonly now: () => number;
  private stopped = false;
  private readonly unsubscribe: () => void;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly holder: ConfigHolder,
    private readonly logger: Logger,
    opts: GetStreamStandingOptions = {},
  ) {
    this.intervalMs = opts.intervalMs ?? GET_STREAM_RECHECK_MS;
    this.now = opts.now ?? Date.now;
    this.unsubscribe = holder.onSwap(({ config }) => this.recheck(config));
    this.timer = setInterval(() => this.recheckCurrent(), this.intervalMs);
    // Never what keeps the process alive.
    this.timer.unref();
  }

  /**
   * Watches a GET stream from the moment its body is relayed until the returned function is called.
   * It is checked against the current config at once: a swap between authenticate and now (the
   * tool server's headers may take seconds) would otherwise go unseen until the next tick.
   */
  track(headers: IncomingHttpHeaders, requestId: string, end: (error: ZenovaError) => void): () => void {
    let ended = false;
    const stream: OpenStream = {
      headers,
      requestId,
      end: (error) => {
        if (ended) return;
        ended = true;
        this.open.delete(stream);
        end(error);
      },
    };
    if (this.stopped) return () => undefined;
    this.open.add(stream);
    const current = this.holder.current();
    if (current.ready) this.check(current.config, stream);
    return () => {
      ended = true;
      this.open.delete(stream);
    };
  }

  /** How many GET streams are watched (for tests and diagnostics). */
  get size(): number {
    return this.open.size;
  }

  /** Re-checks every open stream against `config`, ending those whose key no longer stands. */
  recheck(config: RuntimeConfig): void {
    // A copy: ending a stream removes it from the set.
    for (const stream of [...this.open]) this.check(config, stream);
  }

  /** Stops watching (app close); streams still open are left to the app's own close. */
  stop(): void {
    this.stopped = true;
    this.unsubscribe();
    clearInterval(this.timer);
    this.open.clear();
  }

  private recheckCurrent(): void {
    const current = this.holder.current();
    if (current.ready && this.open.size > 0) this.recheck(current.config);
  }

  private check(config: RuntimeConfig, stream: OpenStream): void {
    const code = standingRefusal(config, stream.headers, this.now());
    if (code === undefined) return;
    this.logger.info({ requestId: stream.requestId, code }, 'MCP event stream ended: its API key no longer admits it');
    stream.end(zenovaError(code, `${zenovaError(code).message} The open MCP event stream was ended.`));
  }
}
