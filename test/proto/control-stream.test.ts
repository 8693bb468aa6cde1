// NodeControl.Connect end to end over real TLS on 127.0.0.1: a grpc-js server built from the
// generated service definition, and the generated client, both imported from proto/src/index.ts.
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import {
  NODE_CREDENTIAL_METADATA_KEY,
  NODE_ID_METADATA_KEY,
  NodeControlClient,
  NodeControlService,
  PROTOCOL_VERSION,
  type ControlMessage,
  type NodeControlServer,
  type NodeMessage,
} from '../../proto/src/index.js';
import { createTestCa, issueServerCert, type IssuedCert } from '../fixtures/tls.js';

const DEADLINE_MS = 30_000;
// Beyond Number.MAX_SAFE_INTEGER: survives the wire only if int64 really maps to bigint.
const BIG = 2n ** 53n + 7n;

type ControlStream = grpc.ClientDuplexStream<NodeMessage, ControlMessage>;

interface HasTeardown {
  teardown(fn: () => void | Promise<void>): void;
}

function withDeadline<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no ${what} within ${DEADLINE_MS} ms`)), DEADLINE_MS);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

interface ControlServer {
  port: number;
  /** Every message the server received, in order. */
  received: NodeMessage[];
  /** Call metadata of every stream opened. */
  calls: grpc.Metadata[];
}

// A minimal control plane: HelloAck for a hello, RecordBatchAck for a batch, heartbeats recorded.
async function startControlServer(t: HasTeardown, identity: IssuedCert): Promise<ControlServer> {
  const received: NodeMessage[] = [];
  const calls: grpc.Metadata[] = [];
  const impl: NodeControlServer = {
    connect(call) {
      calls.push(call.metadata);
      call.on('data', (message: NodeMessage) => {
        received.push(message);
        if (message.hello !== undefined) {
          call.write({
            helloAck: {
              accepted: true,
              serverProtocolVersion: PROTOCOL_VERSION,
              sessionId: 'session-1',
              serverTime: BIG,
              heartbeatIntervalMs: 5000,
            },
          });
        } else if (message.recordBatch !== undefined) {
          const batch = message.recordBatch;
          call.write({
            recordBatchAck: {
              batchId: batch.batchId,
              lastSequence: batch.lastSequence,
              acceptedCount: batch.records.length,
              duplicateCount: 0,
              rejectedCount: 0,
            },
          });
        }
      });
      call.on('end', () => call.end());
      call.on('error', () => undefined); // a cancelled client is not a server failure
    },
  };
  const server = new grpc.Server();
  server.addService(NodeControlService, impl);
  const credentials = grpc.ServerCredentials.createSsl(
    null,
    [{ private_key: Buffer.from(identity.keyPem), cert_chain: Buffer.from(identity.certPem) }],
    false,
  );
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', credentials, (err, boundPort) => (err === null ? resolve(boundPort) : reject(err)));
  });
  t.teardown(() => server.forceShutdown());
  return { port, received, calls };
}

function connectClient(t: HasTeardown, port: number, trustedCaPem: string): ControlStream {
  // Dial the IP but verify the name "localhost": grpc-js would otherwise send the IP as TLS SNI,
  // which Node deprecates (DEP0123).
  const client = new NodeControlClient(`127.0.0.1:${port}`, grpc.credentials.createSsl(Buffer.from(trustedCaPem)), {
    'grpc.ssl_target_name_override': 'localhost',
  });
  t.teardown(() => client.close());
  const metadata = new grpc.Metadata();
  metadata.set(NODE_ID_METADATA_KEY, 'node-7');
  metadata.set(NODE_CREDENTIAL_METADATA_KEY, 'test-credential');
  const stream = client.connect(metadata);
  t.teardown(() => stream.cancel());
  return stream;
}

function messageReader(stream: ControlStream): (what: string) => Promise<ControlMessage> {
  const iterator = stream[Symbol.asyncIterator]() as AsyncIterator<ControlMessage>;
  return async (what) => {
    const next = await withDeadline(iterator.next(), what);
    if (next.done === true) throw new Error(`stream ended while waiting for ${what}`);
    return next.value;
  };
}

const hello: NodeMessage = {
  hello: {
    nodeId: 'node-7',
    nodeName: 'edge-shanghai-1',
    version: '0.1.0',
    protocolVersion: PROTOCOL_VERSION,
    hostname: 'edge-1.example',
    arch: 'x64',
    appliedConfigVersion: 0n,
  },
};

t.test('a node opens the control stream over TLS, is welcomed, and its records are acknowledged', async (t) => {
  const ca = await createTestCa();
  const server = await startControlServer(t, await issueServerCert(ca, { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] }));
  const stream = connectClient(t, server.port, ca.certPem);
  const next = messageReader(stream);

  stream.write(hello);
  const welcome = await next('HelloAck');
  t.ok(welcome.helloAck?.accepted, 'the hello is accepted');
  t.equal(welcome.helloAck?.serverProtocolVersion, PROTOCOL_VERSION);
  t.equal(welcome.helloAck?.serverTime, BIG, 'int64 server time arrives as an exact bigint');

  stream.write({
    heartbeat: {
      sentAt: 1_700_000_000_000n,
      requests5m: 120n,
      errors5m: 3n,
      spoolBytes: BIG,
      backfillBacklog: 42n,
      appliedConfigVersion: 9n,
      ready: true,
    },
  });
  const records = ['req-a', 'req-b'].map((requestId) => ({
    requestId,
    recordJson: Buffer.from(JSON.stringify({ requestId, costMicros: '1500' })),
  }));
  stream.write({ recordBatch: { batchId: 'batch-1', records, firstSequence: BIG - 1n, lastSequence: BIG } });

  const ack = await next('RecordBatchAck');
  t.same(ack.recordBatchAck, { batchId: 'batch-1', lastSequence: BIG, acceptedCount: 2, duplicateCount: 0, rejectedCount: 0 });
  t.equal(typeof ack.recordBatchAck?.lastSequence, 'bigint');

  // The stream is ordered, so the heartbeat and batch were both received before that ack was sent.
  const [gotHello, gotHeartbeat, gotBatch] = server.received;
  t.same(gotHello, hello, 'the hello arrives intact');
  t.same(gotHeartbeat?.heartbeat, {
    sentAt: 1_700_000_000_000n,
    requests5m: 120n,
    errors5m: 3n,
    spoolBytes: BIG,
    backfillBacklog: 42n,
    appliedConfigVersion: 9n,
    ready: true,
  });
  t.same(
    gotBatch?.recordBatch?.records.map((r): unknown => JSON.parse(Buffer.from(r.recordJson).toString('utf8'))),
    [{ requestId: 'req-a', costMicros: '1500' }, { requestId: 'req-b', costMicros: '1500' }],
  );
  t.same(server.calls[0]?.get(NODE_ID_METADATA_KEY), ['node-7'], 'the node id travels as call metadata');

  stream.end();
});

t.test('a node that trusts a different CA cannot connect and gets a TLS UNAVAILABLE error', async (t) => {
  const serverCa = await createTestCa();
  const otherCa = await createTestCa();
  const server = await startControlServer(t, await issueServerCert(serverCa, { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] }));
  const stream = connectClient(t, server.port, otherCa.certPem);
  const failed = new Promise<grpc.ServiceError>((resolve) => stream.once('error', resolve));
  stream.on('data', () => t.fail('no message may arrive over an untrusted connection'));

  stream.write(hello);
  const error = await withDeadline(failed, 'stream error');
  t.equal(error.code, grpc.status.UNAVAILABLE);
  t.match(error.details, /certificate|TLS|SSL|handshake/i, 'the error says why');
  t.equal(server.calls.length, 0, 'the server never saw the call');
  t.equal(server.received.length, 0);
});
