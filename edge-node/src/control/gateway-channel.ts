/**
 * How the node reaches its gateway: a grpc-js client over TLS that trusts only the gateway CA saved
 * at enrollment and checks the certificate against the saved server name (never skipped).
 */
import { isIP } from 'node:net';
import { checkServerIdentity } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { NodeControlClient } from '../../../proto/src/index.js';
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

export function createGatewayClient(gateway: NodeIdentity['gateway']): NodeControlClient {
  const { serverName } = gateway;
  const credentials = grpc.credentials.createSsl(Buffer.from(gateway.caPem), null, null, {
    // Verifies the saved name whatever address is dialled; the CA check itself is grpc-js's default.
    checkServerIdentity: (_host, cert) => checkServerIdentity(serverName, cert),
  });
  const options: grpc.ChannelOptions = {
    'grpc.max_receive_message_length': MAX_RECEIVE_MESSAGE_BYTES,
    'grpc.keepalive_time_ms': KEEPALIVE_TIME_MS,
    'grpc.keepalive_timeout_ms': KEEPALIVE_TIMEOUT_MS,
    'grpc.keepalive_permit_without_calls': 0,
    // Reconnecting is the connect loop's job (with its own back-off); one channel per session.
    'grpc.enable_retries': 0,
  };
  // A DNS name is also sent as TLS SNI; an IP address must not be (RFC 6066, Node DEP0123).
  if (isIP(serverName) === 0) {
    options['grpc.ssl_target_name_override'] = serverName;
    options['grpc.default_authority'] = serverName;
  }
  return new NodeControlClient(gateway.target, credentials, options);
}
