/**
 * The requests the node is serving, for its stop. While it drains, every answer says
 * `Connection: close` (a keep-alive caller must not send its next request to a socket the node is
 * about to close: a POST lost in that race is never read, never answered, never retried). Once
 * the drain deadline passes, the requests still running are ended by the node, not cut: the
 * pipeline answers each with ZN_ERR_NODE_STOPPING (a 503 or a stream's error event) and records it
 * `failed` with that code, where closing their sockets had recorded them `aborted`, as if their
 * callers had left.
 */
import type { ServerResponse } from 'node:http';
import type { FastifyRequest } from 'fastify';
import { zenovaError } from '../errors.js';
import type { ZenovaError } from '../errors.js';

/** The reason a request's switch is aborted with when the node, not its caller, ends it. */
export function nodeStoppingError(): ZenovaError {
  return zenovaError('ZN_ERR_NODE_STOPPING', `${zenovaError('ZN_ERR_NODE_STOPPING').message} The request was still running at its stop deadline; send it again.`);
}

/** Whether a request's switch was aborted by the node's stop (its reason), not by its caller leaving. */
export function isNodeStopping(reason: unknown): reason is ZenovaError {
  return (reason as ZenovaError | undefined)?.code === 'ZN_ERR_NODE_STOPPING';
}

export class InFlightRequests {
  private readonly requests = new Map<FastifyRequest, ServerResponse>();
  private draining = false;
  /** Set once stopAll ran: requests that reach the pipeline after it are ended at once. */
  stopReason: ZenovaError | undefined;
  private emptied: (() => void) | undefined;

  add(request: FastifyRequest, response: ServerResponse): void {
    this.requests.set(request, response);
    if (this.draining) response.shouldKeepAlive = false;
  }

  delete(request: FastifyRequest): void {
    this.requests.delete(request);
    if (this.requests.size === 0) this.emptied?.();
  }

  get size(): number {
    return this.requests.size;
  }

  /** From the stop on, answers not yet begun close their connections after them. */
  drain(): void {
    this.draining = true;
    for (const response of this.requests.values()) if (!response.headersSent) response.shouldKeepAlive = false;
  }

  /**
   * Ends every request the pipeline is running with ZN_ERR_NODE_STOPPING; resolves once all
   * requests have ended, or after `graceMs` (their answers and records take a moment).
   */
  stopAll(graceMs: number): Promise<void> {
    this.drain();
    const reason = (this.stopReason ??= nodeStoppingError());
    for (const request of this.requests.keys()) request.callerGone?.abort(reason);
    if (this.requests.size === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.emptied = undefined;
        resolve();
      };
      const timer = setTimeout(done, graceMs);
      timer.unref();
      this.emptied = done;
    });
  }
}
