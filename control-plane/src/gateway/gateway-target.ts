/**
 * Where nodes dial the node gateway (put in every enrollment answer and install command), and the
 * name they verify its certificate against. With the defaults that is `localhost`: right for the
 * dev stack, wrong for any node on another host, which would enroll and then dial itself.
 */
import { isLoopbackHost } from '../../../proto/src/loopback-host.js';
import { parseListenAddress } from '../settings.js';
import type { Settings } from '../settings.js';
import type { GatewayIdentitySource } from './tls-identity.js';

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

/**
 * The start-up warning when only a node on this host could reach the address nodes are given. A
 * generated certificate is never reissued (docs/architecture.md, "Departures"), so the way to
 * another host depends on whether nodes may already trust this identity.
 */
export function loopbackTargetWarning(
  { target, serverName }: GatewayTarget, identitySource: GatewayIdentitySource, gateway: { hosts: readonly string[]; tlsDir: string },
): string | undefined {
  if (!isLoopbackHost(serverName)) return undefined;
  const loopback = `nodes are told to dial the node gateway at ${target}, a loopback address: only a node on this host can reach it. `;
  // The certificate already names a host others reach (start-up refuses hosts it does not cover):
  // only which one nodes dial is wrong, and no identity need be replaced.
  const reachable = gateway.hosts.find((host) => !isLoopbackHost(host));
  if (reachable !== undefined) {
    return loopback + `For nodes on other hosts, list ${reachable} first in ZENOVA_GATEWAY_HOSTS, or set ZENOVA_GATEWAY_PUBLIC_ADDRESS to ${reachable}:PORT; ` +
      'nodes already enrolled keep dialling the address they were given until re-enrolled';
  }
  const setHosts = 'ZENOVA_GATEWAY_HOSTS (and ZENOVA_GATEWAY_PUBLIC_ADDRESS if they reach it through another port) set to a name or address they reach';
  const replace = `stop the control plane, delete the identity (psql: delete from gateway_tls_identity) and remove ${gateway.tlsDir}, then start again with ${setHosts}`;
  switch (identitySource) {
    case 'generated':
      return loopback + `The gateway TLS identity was generated on this start for ${gateway.hosts.join(',')} and is never reissued, ` +
        `so for nodes on other hosts, before enrolling any node: ${replace}`;
    case 'external':
      return loopback + `For nodes on other hosts, install a certificate (ZENOVA_GATEWAY_CERT_FILE) that also names a host they reach and start again with ${setHosts}; ` +
        'nodes already enrolled keep dialling the address they were given until re-enrolled';
    default:
      return loopback + `The gateway TLS certificate covers only the hosts it was generated for and is never reissued: for nodes on other hosts, ${replace}; ` +
        'a new CA is generated and every node already enrolled must be re-enrolled';
  }
}
