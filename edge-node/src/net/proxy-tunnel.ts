/**
 * A TCP tunnel through an HTTP CONNECT proxy (proxy-policy.ts decides when one applies). The caller
 * runs TLS over the returned socket with its own trust and name checks, so the proxy sees only the
 * target's host:port and ciphertext.
 */
import http from 'node:http';
import net from 'node:net';
import type { ProxyServer } from './proxy-policy.js';

export type ProxyFailureKind = 'refused-connect' | 'proxy-unreachable' | 'timeout';

/** The proxy could not be reached or would not open the tunnel. Names the proxy by host:port only. */
export class ProxyConnectError extends Error {
  readonly kind: ProxyFailureKind;
  readonly proxyLabel: string;
  /** The proxy's answer to CONNECT, for 'refused-connect'. */
  readonly status: number | undefined;
  constructor(kind: ProxyFailureKind, proxy: ProxyServer, message: string, status?: number, cause?: unknown) {
    super(message, cause !== undefined ? { cause } : undefined);
    this.name = 'ProxyConnectError';
    this.kind = kind;
    this.proxyLabel = proxy.label;
    this.status = status;
  }
}

/** `host:port` as CONNECT and Host want it (`[v6]:port`). */
export function authorityOf(host: string, port: number): string {
  return `${net.isIPv6(host) ? `[${host}]` : host}:${port}`;
}

/** What the operator can do about a proxy failure: one line. */
export function proxyAdvice(err: ProxyConnectError, target: string): string {
  const via = `the proxy ${err.proxyLabel} (https_proxy / HTTPS_PROXY)`;
  return err.kind === 'refused-connect'
    ? `${via} does not let this host open ${target}: allow CONNECT to ${target} on the proxy, or, if ${target} is reachable directly, list its host in no_proxy / NO_PROXY`
    : `${via} cannot be reached: check the proxy setting of this host (and of the node service), or list ${target}'s host in no_proxy / NO_PROXY if it is reachable directly`;
}

/** Opens `host:port` through the proxy; rejects with ProxyConnectError within `timeoutMs`. */
export function openTunnel(proxy: ProxyServer, host: string, port: number, timeoutMs: number): Promise<net.Socket> {
  const target = authorityOf(host, port);
  return new Promise<net.Socket>((resolve, reject) => {
    const request = http.request({
      host: proxy.host,
      port: proxy.port,
      method: 'CONNECT',
      path: target,
      // One-off: a pooled agent would keep the proxy connection after a refusal.
      agent: false,
      headers: { host: target, ...(proxy.credentials !== undefined ? { 'proxy-authorization': `Basic ${Buffer.from(proxy.credentials).toString('base64')}` } : {}) },
    });
    let settled = false;
    const fail = (err: ProxyConnectError): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      request.destroy();
      reject(err);
    };
    const timer = setTimeout(
      () => fail(new ProxyConnectError('timeout', proxy, `the proxy ${proxy.label} did not open a tunnel to ${target} within ${timeoutMs} ms`)),
      timeoutMs,
    );
    request.once('connect', (response, socket, head) => {
      if (response.statusCode !== 200) {
        socket.destroy();
        const status = response.statusCode ?? 0;
        fail(new ProxyConnectError('refused-connect', proxy, `the proxy ${proxy.label} answered HTTP ${status}${response.statusMessage ? ` ${response.statusMessage}` : ''} to CONNECT ${target}`, status));
        return;
      }
      if (settled) {
        socket.destroy();
        return;
      }
      settled = true;
      clearTimeout(timer);
      // Bytes the proxy sent after its answer belong to the tunnelled stream.
      if (head.length > 0) socket.unshift(head);
      resolve(socket);
    });
    request.once('response', (response) => {
      // A proxy that answers CONNECT as a normal request (no tunnel) ends up here.
      response.resume();
      fail(new ProxyConnectError('refused-connect', proxy, `the proxy ${proxy.label} answered HTTP ${response.statusCode ?? 0} to CONNECT ${target}`, response.statusCode));
    });
    request.once('error', (err) => {
      fail(new ProxyConnectError('proxy-unreachable', proxy, `cannot reach the proxy ${proxy.label}: ${(err as NodeJS.ErrnoException).code ?? err.message}`, undefined, err));
    });
    request.end();
  });
}
