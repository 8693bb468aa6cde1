/**
 * Waits until node-edge answers 200 on /readyz (a verified config loaded), or its unit failed, or
 * the deadline passed. Polls with a short interval: this is an operator waiting, not a hot path.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import type { ServiceManager } from '../host/service-manager.js';
import { formatListen } from './listen-address.js';
import type { ListenAddress } from './listen-address.js';

export const READY_TIMEOUT_MS = 60_000;
const POLL_MS = 500;
const REQUEST_TIMEOUT_MS = 2_000;

export type ReadyOutcome = { ready: true } | { ready: false; reason: string };

export type ReadinessWaiter = (opts: { url: string; unit: string; services: ServiceManager; timeoutMs: number }) => Promise<ReadyOutcome>;

/** `0.0.0.0:7480` → `http://127.0.0.1:7480/readyz`, `[::]:7480` → `http://[::1]:7480/readyz` (the node is asked on loopback). */
export function readyzUrl(listen: ListenAddress): string {
  const host = listen.host === '0.0.0.0' ? '127.0.0.1' : listen.host === '::' ? '::1' : listen.host;
  return `http://${formatListen({ host, port: listen.port })}/readyz`;
}

export const waitForReadiness: ReadinessWaiter = async ({ url, unit, services, timeoutMs }) => {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer yet';
  for (;;) {
    try {
      const res = await request(url, { headersTimeout: REQUEST_TIMEOUT_MS, bodyTimeout: REQUEST_TIMEOUT_MS });
      const body = (await res.body.json().catch(() => ({}))) as { reason?: string };
      if (res.statusCode === 200) return { ready: true };
      last = `not ready: ${body.reason ?? `HTTP ${res.statusCode}`}`;
    } catch (err) {
      last = `no answer on ${url} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`;
    }
    const state = await services.state(unit);
    if (state === 'failed') return { ready: false, reason: `${unit} failed to start (${last})` };
    if (Date.now() >= deadline) return { ready: false, reason: `${unit} was not ready within ${Math.round(timeoutMs / 1000)} s (state ${state}; ${last})` };
    await sleep(POLL_MS);
  }
};
