/**
 * How the node reaches its gateway: a grpc-js client over TLS that trusts only the gateway CA saved
 * at enrollment — or, when the control plane pinned none, this host's system trust store — and
 * checks the certificate against the saved server name (never skipped). The route is the node's
 * one proxy policy (net/proxy-policy.ts), the same as enrollment's and doctor's: grpc-js's own
 * reading of grpc_proxy/https_proxy/http_proxy/no_proxy is switched off and the proxy is given to
 * it explicitly.
 */
import { isIP } from 'node:net';
import { checkServerIdentity, createSecureContext } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { NodeControlClient } from '../../../proto/src/index.js';
import { proxyFor } from '../net/proxy-policy.js';
import type { ProxyServer } from '../net/proxy-policy.js';
import { gatewayTrust } from '../state/identity.js';
import type { NodeIdentity } from '../state/identity.js';

/** Config bundles come later over this stream; bound what one message may cost in memory. */
const MAX_RECEIVE_MESSAGE_BYTES = 16 * 1024 * 1024;
/** HTTP/2 pings find a dead link (a silent NAT drop) that TCP alone would notice only much later. */
const KEEPALIVE_TIME_MS = 30_000;
const KEEPALIVE_TIMEOUT_MS = 10_000;

export interface GatewayAddress {
  host: string;
  port: number;
}

/** `host:port` or `[v6]:port`. */
export function parseGatewayTarget(target: string): GatewayAddress {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]\s]+)):(\d{1,5})$/.exec(target);
  const host = match?.[1] ?? match?.[2];
  const port = Number(match?.[3]);
  if (host === undefined || !Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`invalid gateway target ${JSON.stringify(target)}`);
  return { host, port };
}

/**
 * The TLS credentials for the gateway: the pinned CA as the only root, or Node's default CA store
 * (the same store tls.connect and the enrollment client use without `ca`). Either way grpc-js
 * refuses an unverified certificate (rejectUnauthorized is never turned off) and the certificate
 * must carry the saved server name, whatever address is dialled.
 */
export function gatewayChannelCredentials(gateway: NodeIdentity['gateway']): grpc.ChannelCredentials {
  const { serverName } = gateway;
  // rejectUnauthorized stated outright (grpc-js checks it itself too), never left to the environment.
  const verify: grpc.VerifyOptions = { checkServerIdentity: (_host, cert) => checkServerIdentity(serverName, cert), rejectUnauthorized: true };
  const trust = gatewayTrust(gateway);
  if (trust.kind === 'pinned-ca') return grpc.credentials.createSsl(Buffer.from(trust.caPem), null, null, verify);
  // Not createSsl(null): grpc-js would then read GRPC_DEFAULT_SSL_ROOTS_FILE_PATH instead, a trust
  // that doctor's probe and enrollment would not share.
  return grpc.credentials.createFromSecureContext(createSecureContext(), verify);
}

/** The proxy the control link goes through, or undefined for a direct link. Throws ProxySettingError. */
export function gatewayProxy(gateway: NodeIdentity['gateway']): ProxyServer | undefined {
  const { host, port } = parseGatewayTarget(gateway.target);
  return proxyFor(host, port);
}

export function createGatewayClient(gateway: NodeIdentity['gateway'], proxy: ProxyServer | undefined = gatewayProxy(gateway)): NodeControlClient {
  const { serverName } = gateway;
  const credentials = gatewayChannelCredentials(gateway);
  const options: grpc.ChannelOptions = {
    'grpc.max_receive_message_length': MAX_RECEIVE_MESSAGE_BYTES,
    'grpc.keepalive_time_ms': KEEPALIVE_TIME_MS,
    'grpc.keepalive_timeout_ms': KEEPALIVE_TIMEOUT_MS,
    'grpc.keepalive_permit_without_calls': 0,
    // Reconnecting is the connect loop's job (with its own back-off); one channel per session.
    'grpc.enable_retries': 0,
    // grpc-js would read the proxy variables its own way (http_proxy too, lowercase only).
    'grpc.enable_http_proxy': 0,
  };
  if (proxy !== undefined) {
    // What grpc-js's own proxy mapping would set: dial the proxy, CONNECT to the gateway, and
    // keep the gateway (not the proxy) as the TLS host and the :authority.
    options['grpc.http_connect_target'] = `dns:${gateway.target}`;
    options['grpc.default_authority'] = gateway.target;
    if (proxy.credentials !== undefined) options['grpc.http_connect_creds'] = proxy.credentials;
  }
  // A DNS name is also sent as TLS SNI; an IP address must not be (RFC 6066, Node DEP0123).
  if (isIP(serverName) === 0) {
    options['grpc.ssl_target_name_override'] = serverName;
    options['grpc.default_authority'] = serverName;
  }
  return new NodeControlClient(proxy !== undefined ? proxy.label : gateway.target, credentials, options);
}
