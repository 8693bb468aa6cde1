/**
 * A one-off check of the gateway for `doctor`: can this host open a TCP connection to it, and does
 * its TLS certificate verify against the saved CA (or, with none saved, the system trust store) and
 * server name? Sends nothing after the handshake and changes nothing. With a proxy (the control
 * link's route, gateway-channel.ts gatewayProxy), both checks go through its CONNECT tunnel, as the
 * link does.
 */
import net from 'node:net';
import tls from 'node:tls';
import type { ProxyServer } from '../net/proxy-policy.js';
import { ProxyConnectError, openTunnel, proxyAdvice } from '../net/proxy-tunnel.js';
import { gatewayTrust } from '../state/identity.js';
import type { NodeIdentity } from '../state/identity.js';
import { classifyTlsFailure } from '../tls/tls-failure.js';
import type { TlsFailureKind } from '../tls/tls-failure.js';
import { parseGatewayTarget } from './gateway-channel.js';

/** `advice` is set when the failure is the proxy's (what to do is then about the proxy). */
export type ProbeResult = { ok: true } | { ok: false; kind: TlsFailureKind; message: string; advice?: string };

function failure(err: unknown, gateway: NodeIdentity['gateway']): ProbeResult {
  if (err instanceof ProxyConnectError) return { ok: false, kind: 'other', message: err.message, advice: `${err.message}: ${proxyAdvice(err, gateway.target)}` };
  return { ok: false, kind: classifyTlsFailure(err), message: err instanceof Error ? err.message : String(err) };
}

export function probeTcp(gateway: NodeIdentity['gateway'], timeoutMs: number, proxy?: ProxyServer): Promise<ProbeResult> {
  const { host, port } = parseGatewayTarget(gateway.target);
  if (proxy !== undefined) {
    // Through a proxy, "reachable" means the proxy opened the tunnel to the gateway.
    return openTunnel(proxy, host, port, timeoutMs).then(
      (socket): ProbeResult => {
        socket.destroy();
        return { ok: true };
      },
      (err: unknown) => failure(err, gateway),
    );
  }
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ ok: false, kind: 'timeout', message: `no TCP connection within ${timeoutMs} ms` });
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.end();
      resolve({ ok: true });
    });
    socket.once('error', (err) => {
      clearTimeout(timer);
      resolve(failure(err, gateway));
    });
  });
}

export async function probeTls(gateway: NodeIdentity['gateway'], timeoutMs: number, proxy?: ProxyServer): Promise<ProbeResult> {
  const { host, port } = parseGatewayTarget(gateway.target);
  const { serverName } = gateway;
  const trust = gatewayTrust(gateway);
  const startedAt = Date.now();
  let tunnel: net.Socket | undefined;
  if (proxy !== undefined) {
    try {
      tunnel = await openTunnel(proxy, host, port, timeoutMs);
    } catch (err) {
      return failure(err, gateway);
    }
  }
  const left = Math.max(1, timeoutMs - (Date.now() - startedAt));
  return new Promise((resolve) => {
    const socket = tls.connect({
      ...(tunnel !== undefined ? { socket: tunnel } : { host, port }),
      // Without a pinned CA, Node's default store: the roots the gateway client uses then.
      ...(trust.kind === 'pinned-ca' ? { ca: trust.caPem } : {}),
      // SNI only for DNS names (RFC 6066); the name check below applies either way.
      ...(net.isIP(serverName) === 0 ? { servername: serverName } : {}),
      checkServerIdentity: (_host, cert) => tls.checkServerIdentity(serverName, cert),
      // Not left to NODE_TLS_REJECT_UNAUTHORIZED.
      rejectUnauthorized: true,
      ALPNProtocols: ['h2'],
    });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ ok: false, kind: 'timeout', message: `no TLS handshake within ${timeoutMs} ms` });
    }, left);
    socket.once('secureConnect', () => {
      clearTimeout(timer);
      const result: ProbeResult = socket.authorized ? { ok: true } : failure(socket.authorizationError, gateway);
      socket.end();
      resolve(result);
    });
    socket.once('error', (err) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(failure(err, gateway));
    });
  });
}
