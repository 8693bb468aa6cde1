/**
 * Open MCP GET event streams end when a new request of theirs would be refused. A request is
 * checked once, when it arrives (stages authenticate and surface), and keeps its config snapshot to
 * the end; a GET stream may stay open for hours, so without this a revoked, expired or deleted key
 * (or a suspended or deleted account), a key whose allowed tool servers no longer name its server, a
 * tools surface taken off the node or a deleted tool server would keep relaying the tool server's
 * pushes while new requests are refused. Each open GET stream is re-checked, as a new request would
 * be (the key with authenticate's own findCallerKey + checkKeyStanding, then the surface, then the
 * key's allowed tool servers and the tool server by name), against every new config when
 * it is swapped in, and against the current config every `intervalMs` (30 s) so an expiresAt
 * passing without a swap ends it too. A re-check rather than a cap on a stream's lifetime: healthy
 * streams are never cut. A stream that fails the check is ended with the code a new request would
 * be refused with: its tool server GET is aborted, its record says `failed` with that code, and the
 * caller's response is cut off as any relayed body that fails (the caller's MCP client reconnects
 * and gets the refusal).
 *
 * A stream's output guardrails are the key's policy when it opened; a config that changes the
 * policy's output rules for its key (a rule added, changed or removed, another policy named, or
 * none) ends it cleanly too, recorded with ZN_ERR_GUARDRAIL_POLICY_CHANGED: the client reconnects
 * and its new stream is checked by the rules now in force (an admin adding a mask rule must not
 * wait for hours-old push channels to close by themselves).
 *
 * The node's stop (app close, serve's SIGTERM) ends every open stream too (endAll): a push channel
 * never drains, so the stop would otherwise wait out serve's deadline and then cut it. Those end
 * cleanly (the client reconnects, to this node once it is back or to another) and are recorded
 * `failed` with ZN_ERR_NODE_STOPPING: the node ended them, not the caller.
 *
 * So does the node's deletion (the control plane refused it NODE_DELETED: CreditLeases.nodeDeletion,
 * the lease book's memory, which the identify stage refuses every new request by): asked every
 * DELETION_CHECK_MS (a read from memory, no store), and when a stream's head arrives. A deleted node
 * serves nobody, and a stream admitted before would otherwise relay the tool server's pushes for
 * hours. Each ends cleanly, as at the stop (its client reconnects, and this node refuses it
 * ZN_ERR_NODE_DELETED), its tool server GET aborted and its record finished `failed` with
 * ZN_ERR_NODE_STOPPING: the node ended it (not ZN_ERR_NODE_DELETED, whose records the spool stage
 * leaves unwritten as refusals that never went upstream).
 */
import { createHash } from 'node:crypto';
import { checkKeyStanding, findCallerKey } from '../../auth/api-key-verifier.js';
import type { KeyStanding } from '../../auth/api-key-verifier.js';
import type { ConfigHolder } from '../../config/config-holder.js';
import type { RuntimeConfig } from '../../config/runtime-config.js';
import { zenovaError } from '../../errors.js';
import type { ZenovaError } from '../../errors.js';
import type { Logger } from '../../logger.js';
import { mayUseToolServer } from '../../routing/route-tool-server.js';

/** How often open GET streams are re-checked without a config swap (for an expiresAt passing). */
export const GET_STREAM_RECHECK_MS = 30_000;
/** How often the node's deletion is asked while streams are open (a read from memory). */
export const DELETION_CHECK_MS = 1_000;

export interface GetStreamStandingOptions {
  /** Re-check period; GET_STREAM_RECHECK_MS by default. */
  intervalMs?: number;
  /** Unix ms for expiresAt; Date.now by default (tests move it by hand). */
  now?: () => number;
  /**
   * Whether the control plane deleted the node (CreditLeases.nodeDeletion): every open stream is
   * ended then. Absent: never (billing off, stand-alone mode).
   */
  deleted?: () => boolean;
}

/** What a watched stream was opened with: enough to check it again as a new request. */
export interface WatchedRequest {
  /** The request's header lines as sent: the presented key is looked up in each new config as authenticate does. */
  readonly rawHeaders: readonly string[];
  readonly requestId: string;
  /** The tool server the stream is open to (its name in the config, /mcp/{server}). */
  readonly server: string;
  /** outputRulesOf the config and key it was admitted with: the rules its pushes are checked by. */
  readonly outputRules: string;
}

/**
 * How a stream is ended: `refused` cuts the caller's response (its client reconnects into the
 * refusal), `stopping` ends it cleanly (the node's stop; its client reconnects elsewhere or later),
 * `renewed` ends it cleanly too (its output rules changed; its client reconnects under the new ones).
 */
export type StreamEnd = 'refused' | 'stopping' | 'renewed';

interface OpenStream extends WatchedRequest {
  /** Ends the stream (aborts the tool server GET) with why; called at most once. */
  readonly end: (error: ZenovaError, how: StreamEnd) => void;
}

/**
 * How authenticate would now find the caller who sent `rawHeaders` under `config`: its key, or the
 * code it would be refused with; undefined for a config without keys (stand-alone mode), which
 * admits every caller, as authenticate does.
 */
function callerStanding(config: RuntimeConfig, rawHeaders: readonly string[], now: number): KeyStanding | undefined {
  if (config.apiKeys === null) return undefined;
  const found = findCallerKey(config.apiKeys, rawHeaders);
  if (!found.ok) return { ok: false, code: found.code };
  return checkKeyStanding(config, found.key, now);
}

/**
 * Why a new request like `stream` would now be refused under `config`, in the pipeline's order
 * (authenticate: `standing`, its key as callerStanding finds it; then surface), or undefined when it would be admitted.
 */
function streamRefusal(config: RuntimeConfig, stream: WatchedRequest, standing: KeyStanding | undefined): ZenovaError | undefined {
  if (standing?.ok === false) return zenovaError(standing.code, `${zenovaError(standing.code).message} The open MCP event stream was ended.`);
  if (!config.surfaces.has('tools')) {
    return zenovaError('ZN_ERR_SURFACE_DISABLED', 'This node does not serve the tools surface (/mcp) any more. The open MCP event stream was ended.');
  }
  // The server's name was a config's tool server name when the stream opened, so it is safe to quote.
  if (!mayUseToolServer(standing?.key, stream.server)) {
    return zenovaError('ZN_ERR_TOOL_SERVER_NOT_ALLOWED', `This API key may not use the tool server "${stream.server}" any more. The open MCP event stream was ended.`);
  }
  if (!config.toolServers.has(stream.server)) {
    return zenovaError('ZN_ERR_TOOL_SERVER_NOT_FOUND', `No tool server "${stream.server}" on this node any more. The open MCP event stream was ended.`);
  }
  return undefined;
}

/**
 * The output rules of guardrail policy `policyId` in `config`, as one string to compare: '' for no
 * policy, the id alone for a policy the config lacks (every request of it is blocked). Input rules
 * are left out: a GET stream has no input to check.
 */
export function outputRulesOf(config: RuntimeConfig, policyId: string | null): string {
  if (policyId === null) return '';
  const policy = config.guardrailPolicies.get(policyId);
  if (policy === undefined) return `missing:${policyId}`;
  let digest = outputRuleDigests.get(policy);
  if (digest === undefined) {
    const rules = JSON.stringify(policy.rules.filter((rule) => rule.on !== 'input'));
    digest = `${policyId}:${createHash('sha256').update(rules).digest('hex')}`;
    outputRuleDigests.set(policy, digest);
  }
  return digest;
}

/**
 * What a stream the node's deletion ended is recorded with: the node ended it (ZN_ERR_NODE_STOPPING),
 * and the spool stage writes its record (one with ZN_ERR_NODE_DELETED it would leave unwritten).
 */
function nodeDeletedEnd(): ZenovaError {
  return zenovaError('ZN_ERR_NODE_STOPPING', 'This node was deleted from the control plane and no longer serves. The open MCP event stream was ended.');
}

/**
 * Per policy object (one per config snapshot): a policy's keyword lists may run to megabytes, and
 * every open stream is compared on each swap and every 30 s.
 */
const outputRuleDigests = new WeakMap<object, string>();

/** The open GET streams of one app, re-checked on every config swap and on a timer, ended at its stop. */
export class GetStreamStanding {
  private readonly open = new Set<OpenStream>();
  private readonly intervalMs: number;
  private readonly now: () => number;
  private stopped = false;
  /** Set by endAll: a stream tracked from then on is ended with it at once. */
  private stopping: ZenovaError | undefined;
  private readonly unsubscribe: () => void;
  private readonly timer: NodeJS.Timeout;
  private readonly deleted: (() => boolean) | undefined;
  private readonly deletionTimer: NodeJS.Timeout | undefined;

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
    this.deleted = opts.deleted;
    if (this.deleted !== undefined) {
      this.deletionTimer = setInterval(() => this.endIfDeleted(), DELETION_CHECK_MS);
      this.deletionTimer.unref();
    }
  }

  /**
   * Watches a GET stream from the moment its body is relayed until the returned function is called.
   * It is checked against the current config at once: a swap between authenticate and now (the
   * tool server's headers may take seconds) would otherwise go unseen until the next tick. One
   * whose head arrives while the node stops is ended at once, as the others were.
   */
  track(request: WatchedRequest, end: (error: ZenovaError, how: StreamEnd) => void): () => void {
    let ended = false;
    const stream: OpenStream = {
      rawHeaders: request.rawHeaders,
      requestId: request.requestId,
      server: request.server,
      outputRules: request.outputRules,
      end: (error, how) => {
        if (ended) return;
        ended = true;
        this.open.delete(stream);
        end(error, how);
      },
    };
    if (this.stopping !== undefined) {
      stream.end(this.stopping, 'stopping');
      return () => undefined;
    }
    if (this.stopped) return () => undefined;
    // Admitted before the deletion, its head arriving after it.
    if (this.deleted?.() === true) {
      this.logger.info({ requestId: request.requestId }, 'MCP event stream ended: the control plane deleted this node');
      stream.end(nodeDeletedEnd(), 'stopping');
      return () => undefined;
    }
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

  /**
   * The node is stopping: every open stream is ended cleanly with ZN_ERR_NODE_STOPPING (its tool
   * server GET aborted), and so is any stream tracked from now on.
   */
  endAll(): void {
    this.stopping ??= zenovaError('ZN_ERR_NODE_STOPPING', `${zenovaError('ZN_ERR_NODE_STOPPING').message} The open MCP event stream was ended; reconnect.`);
    if (this.open.size > 0) this.logger.info({ streams: this.open.size }, 'MCP event streams ended: the node is stopping');
    for (const stream of [...this.open]) stream.end(this.stopping, 'stopping');
  }

  /** Stops watching (app close, after endAll); streams still open are left to the app's own close. */
  stop(): void {
    this.stopped = true;
    this.unsubscribe();
    clearInterval(this.timer);
    clearInterval(this.deletionTimer);
    this.open.clear();
  }

  /** Ends every open stream cleanly once the node is deleted (its records ZN_ERR_NODE_STOPPING). */
  private endIfDeleted(): void {
    if (this.open.size === 0 || this.deleted?.() !== true) return;
    this.logger.info({ streams: this.open.size }, 'MCP event streams ended: the control plane deleted this node');
    const error = nodeDeletedEnd();
    for (const stream of [...this.open]) stream.end(error, 'stopping');
  }

  private recheckCurrent(): void {
    const current = this.holder.current();
    if (current.ready && this.open.size > 0) this.recheck(current.config);
  }

  private check(config: RuntimeConfig, stream: OpenStream): void {
    // The caller's key looked up once (a hash of it) for both questions.
    const standing = callerStanding(config, stream.rawHeaders, this.now());
    const refusal = streamRefusal(config, stream, standing);
    if (refusal !== undefined) {
      this.logger.info({ requestId: stream.requestId, code: refusal.code }, 'MCP event stream ended: a new request of it would now be refused');
      stream.end(refusal, 'refused');
      return;
    }
    if (outputRulesOf(config, standing?.ok === true ? standing.key.guardrailPolicyId : null) === stream.outputRules) return;
    this.logger.info({ requestId: stream.requestId }, "MCP event stream ended: its key's output guardrails changed; the client reconnects under the new ones");
    stream.end(zenovaError('ZN_ERR_GUARDRAIL_POLICY_CHANGED'), 'renewed');
  }
}
