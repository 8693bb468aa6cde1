/**
 * Where nodes dial the node gateway (put in every enrollment answer and install command), and the
 * name they verify its certificate against. With the defaults that is `localhost`: right for the
 * dev stack, wrong for any node on another host, which would enroll and then dial itself.
 */
import { isLoopbackHost } from '../../../proto/src/loopback-host.js';
import { parseListenAddress } from '../settings.js';
import type { Settings } from '../settings.js';

export interface GatewayTarget {
  target: string;
  serverName: string;
}

export function gatewayTarget(settings: Settings, boundPort: number): GatewayTarget {
  const configured = settings.gateway.publicAddress;
  const parsed = configured === undefined ? undefined : parseListenAddress(configured);
  if (configured !== undefined && parsed) return { target: configured, serverName: parsed.host };
  const host = settings.gateway.hosts[0] ?? 'localhost';
  return { target: `${host.includes(':') ? `[${host}]` : host}:${boundPort}`, serverName: host };
}

/** The start-up warning when only a node on this host could reach the address nodes are given. */
export function loopbackTargetWarning({ target, serverName }: GatewayTarget): string | undefined {
  if (!isLoopbackHost(serverName)) return undefined;
  return `nodes are told to dial the node gateway at ${target}, a loopback address: only a node on this host can reach it. ` +
    'For nodes on other hosts set ZENOVA_GATEWAY_HOSTS (and ZENOVA_GATEWAY_PUBLIC_ADDRESS if they reach it through another port) to a name or address they reach';
}
