/**
 * Waits until node-edge answers 200 on /readyz (a verified config loaded), or its unit failed, or
 * the deadline passed. Polls with a short interval: this is an operator waiting, not a hot path.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import type { Dispatcher } from 'undici';
import type { ServiceManager } from '../host/service-manager.js';
import { formatListen } from './listen-address.js';
import type { ListenAddress } from './listen-address.js';
import { loopbackTlsAgent } from './node-tls-probe.js';

export const READY_TIMEOUT_MS = 60_000;
const POLL_MS = 500;
const REQUEST_TIMEOUT_MS = 2_000;

export type ReadyOutcome = { ready: true } | { ready: false; reason: string };

/**
 * `tlsCertPem`: the certificate file the node serves HTTPS with (its /readyz is then asked over https, trusting only it).
 * `controlLink`: ready also needs the control link up (an upgrade, DESIGN §8: config loaded and the control session
 * authenticated), not only a config, which a node serving from its cache has at once.
 */
export type ReadinessWaiter = (opts: { url: string; unit: string; services: ServiceManager; timeoutMs: number; tlsCertPem?: string; controlLink?: boolean }) => Promise<ReadyOutcome>;

/**
 * `0.0.0.0:7480` → `http://127.0.0.1:7480/readyz`, `[::]:7480` → `http://[::1]:7480/readyz` (the
 * node is asked on loopback); `https://` when its caller port serves TLS.
 */
export function readyzUrl(listen: ListenAddress, tls = false): string {
  const host = listen.host === '0.0.0.0' ? '127.0.0.1' : listen.host === '::' ? '::1' : listen.host;
  return `${tls ? 'https' : 'http'}://${formatListen({ host, port: listen.port })}/readyz`;
}

/** undici's request options for /readyz: over https, the loopback probe that trusts only the node's certificate. */
export function readyzRequestOptions(timeoutMs: number, dispatcher: Dispatcher | undefined): { headersTimeout: number; bodyTimeout: number; dispatcher?: Dispatcher } {
  return { headersTimeout: timeoutMs, bodyTimeout: timeoutMs, ...(dispatcher !== undefined ? { dispatcher } : {}) };
}

export const waitForReadiness: ReadinessWaiter = async ({ url, unit, services, timeoutMs, tlsCertPem, controlLink = false }) => {
  const agent = tlsCertPem !== undefined ? loopbackTlsAgent(tlsCertPem) : undefined;
  try {
    return await pollReadiness(url, unit, services, timeoutMs, agent, controlLink);
  } finally {
    await agent?.close();
  }
};

interface ReadyzBody {
  reason?: string;
  code?: string;
  configVersion?: number | null;
  controlPlane?: { connected?: boolean; lastError?: { code?: string } } | null;
}

/**
 * A node whose spool is full answers 503 so that load balancers send callers elsewhere, but it
 * started: its config is loaded (and its link up, checked apart). An upgrade is not rolled back for
 * it (DESIGN §8: config loaded, control session authenticated); the link, once up, drains the spool.
 */
function startedWithFullSpool(status: number, body: ReadyzBody): boolean {
  return status === 503 && body.code === 'ZN_ERR_SPOOL_FULL' && typeof body.configVersion === 'number';
}

/** Why a 200 /readyz is not enough when the control link must be up too; undefined when it is. */
function controlLinkDown(body: ReadyzBody): string | undefined {
  if (body.controlPlane?.connected === true) return undefined;
  const code = body.controlPlane?.lastError?.code;
  return `config loaded, but the control link is not up yet${code !== undefined ? ` (last error ${code})` : ''}`;
}

async function pollReadiness(url: string, unit: string, services: ServiceManager, timeoutMs: number, agent: Dispatcher | undefined, controlLink: boolean): Promise<ReadyOutcome> {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer yet';
  for (;;) {
    try {
      const res = await request(url, readyzRequestOptions(REQUEST_TIMEOUT_MS, agent));
      const body = (await res.body.json().catch(() => ({}))) as ReadyzBody;
      const started = res.statusCode === 200 || startedWithFullSpool(res.statusCode, body);
      const linkDown = started && controlLink ? controlLinkDown(body) : undefined;
      if (started && linkDown === undefined) return { ready: true };
      last = `not ready: ${linkDown ?? body.reason ?? `HTTP ${res.statusCode}`}`;
    } catch (err) {
      last = `no answer on ${url} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`;
    }
    const state = await services.state(unit);
    if (state === 'failed') return { ready: false, reason: `${unit} failed to start (${last})${await crashLoop(services, unit)}` };
    if (Date.now() >= deadline) return { ready: false, reason: `${unit} was not ready within ${Math.round(timeoutMs / 1000)} s (state ${state}; ${last})${await crashLoop(services, unit)}` };
    await sleep(POLL_MS);
  }
}

/**
 * A unit systemd keeps restarting reads as "activating" at the deadline, like a slow start; its
 * restart count says it is crash-looping, and its last exit says how it ends.
 */
async function crashLoop(services: ServiceManager, unit: string): Promise<string> {
  const record = await services.restartRecord(unit).catch(() => undefined);
  if (record === undefined || record.restarts === 0) return '';
  return `: it is crash-looping (systemd restarted it ${record.restarts} time${record.restarts === 1 ? '' : 's'}${record.lastExit !== undefined ? `; its main process last ${record.lastExit}` : ''})`;
}
