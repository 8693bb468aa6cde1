// Child process of gateway-system-trust.test.ts: opens one control stream with the node's own
// gateway client (createGatewayClient) from the identity saved in the state dir given as argv[2],
// and prints one JSON line: whether the gateway accepted the hello, or how the connection failed.
// A child, so that NODE_EXTRA_CA_CERTS (read once at start-up) can differ per run.
import * as grpc from '@grpc/grpc-js';
import { NODE_CREDENTIAL_METADATA_KEY, NODE_ID_METADATA_KEY, PROTOCOL_VERSION } from '../../proto/src/index.js';
import type { ControlMessage } from '../../proto/src/index.js';
import { createGatewayClient } from '../../edge-node/src/control/gateway-channel.js';
import { loadCredentials } from '../../edge-node/src/state/credential-store.js';
import { loadIdentity } from '../../edge-node/src/state/identity.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import { classifyTlsFailure } from '../../edge-node/src/tls/tls-failure.js';

const TIMEOUT_MS = 15_000;

const store = await openStateStore(process.argv[2] ?? '', { create: false });
const identity = await loadIdentity(store);
const credentials = await loadCredentials(store);
if (identity === undefined || credentials === undefined) throw new Error('the state dir is not enrolled');

const client = createGatewayClient(identity.gateway);
const metadata = new grpc.Metadata();
metadata.set(NODE_ID_METADATA_KEY, identity.nodeId);
metadata.set(NODE_CREDENTIAL_METADATA_KEY, credentials.current.secret);
const stream = client.connect(metadata);
const result = await new Promise<{ accepted: boolean; kind?: string; message?: string }>((resolve) => {
  const timer = setTimeout(() => resolve({ accepted: false, kind: 'timeout' }), TIMEOUT_MS);
  stream.on('data', (message: ControlMessage) => {
    if (message.helloAck === undefined) return;
    clearTimeout(timer);
    resolve({ accepted: message.helloAck.accepted });
  });
  stream.on('error', (err: Error) => {
    clearTimeout(timer);
    resolve({ accepted: false, kind: classifyTlsFailure(err), message: err.message });
  });
  stream.write({
    hello: { nodeId: identity.nodeId, nodeName: identity.nodeName, version: '0.1.0', protocolVersion: PROTOCOL_VERSION, hostname: 'child', arch: process.arch, appliedConfigVersion: 0n },
  });
});
process.stdout.write(`${JSON.stringify(result)}\n`);
stream.cancel();
client.close();
process.exit(0);
