// A scriptable NodeControl gateway for control-link tests: grpc-js over real TLS with a throwaway
// CA, recording metadata and messages per session, able to refuse, rotate, push config, stop and
// come back on the same port. Plus an enrolled state dir pointing at it.
import { randomBytes, randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { NODE_CREDENTIAL_METADATA_KEY, NODE_ID_METADATA_KEY, NodeControlService, PROTOCOL_VERSION } from '../../proto/src/index.js';
import type { ControlMessage, NodeControlServer, NodeMessage } from '../../proto/src/index.js';
import { saveCredentials } from '../../edge-node/src/state/credential-store.js';
import type { CredentialFile, StoredCredential } from '../../edge-node/src/state/credential-store.js';
import { saveIdentity } from '../../edge-node/src/state/identity.js';
import type { NodeIdentity } from '../../edge-node/src/state/identity.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import type { StateStore } from '../../edge-node/src/state/state-store.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';
import type { IssuedCert, TestCa } from '../fixtures/tls.js';
import { freePort } from '../fixtures/free-port.js';
import { waitFor } from '../fixtures/wait-for.js';
import { CONFIG_SIGNING_PUBLIC_KEY_PEM } from './enroll-fixtures.js';

export interface FakeSession {
  index: number;
  nodeId: string | undefined;
  credential: string | undefined;
  received: NodeMessage[];
  ended: boolean;
  send(message: ControlMessage): void;
  /** Refusal message, then the call ends with `status` and details "CODE: message". */
  refuse(code: string, message: string, status?: grpc.status): void;
  /** Ends the call with a status only, no Refusal message first. */
  fail(status: grpc.status, details: string): void;
  /** Ends the call with OK, as a server closing cleanly. */
  close(): void;
}

/** What the gateway does with a new call before any message: undefined = wait for the hello. */
export type Authorize = (session: FakeSession) => { code: string; message: string; status?: grpc.status } | undefined;

export interface FakeGatewayOptions {
  heartbeatIntervalMs?: number;
  authorize?: Authorize;
  /** Called after the HelloAck went out. */
  onWelcome?: (session: FakeSession) => void;
  /** Called for every message after the hello. */
  onMessage?: (session: FakeSession, message: NodeMessage) => void;
  /** Leave the hello unanswered (false) or accept it (default). */
  answerHello?: boolean;
  ca?: TestCa;
  /** Names in the certificate (default localhost + 127.0.0.1). */
  dnsNames?: string[];
  /** The HelloAck's server_time (unix ms); Date.now() by default. */
  serverTime?: () => number;
}

export interface FakeGateway {
  port: number;
  target: string;
  ca: TestCa;
  sessions: FakeSession[];
  waitForSession(index: number): Promise<FakeSession>;
  waitForMessage(session: FakeSession, pick: (m: NodeMessage) => boolean, what: string): Promise<NodeMessage>;
  /** The node's ConfigAck for `version` on `session`. */
  waitForConfigAck(session: FakeSession, version: number): Promise<NonNullable<NodeMessage['configAck']>>;
  stop(): void;
  /** Binds the same port again (after stop). */
  restart(): Promise<void>;
}

export async function startFakeGateway(t: { teardown(fn: () => unknown): void }, opts: FakeGatewayOptions = {}): Promise<FakeGateway> {
  const ca = opts.ca ?? (await createTestCa());
  const cert: IssuedCert = await issueServerCert(ca, { dnsNames: opts.dnsNames ?? ['localhost'], ipAddresses: ['127.0.0.1'] });
  const sessions: FakeSession[] = [];
  let server: grpc.Server | undefined;

  const impl: NodeControlServer = {
    connect(call) {
      const session: FakeSession = {
        index: sessions.length,
        nodeId: call.metadata.get(NODE_ID_METADATA_KEY)[0]?.toString(),
        credential: call.metadata.get(NODE_CREDENTIAL_METADATA_KEY)[0]?.toString(),
        received: [],
        ended: false,
        send: (message) => {
          if (!session.ended) call.write(message);
        },
        refuse: (code, message, status = grpc.status.UNAUTHENTICATED) => {
          if (session.ended) return;
          call.write({ refusal: { error: { code, message, retryable: false }, serverProtocolVersion: PROTOCOL_VERSION } });
          session.ended = true;
          call.emit('error', { code: status, details: `${code}: ${message}` });
        },
        fail: (status, details) => {
          if (session.ended) return;
          session.ended = true;
          call.emit('error', { code: status, details });
        },
        close: () => {
          if (session.ended) return;
          session.ended = true;
          call.end();
        },
      };
      sessions.push(session);
      call.on('error', () => undefined);
      call.on('cancelled', () => {
        session.ended = true;
      });
      call.on('end', () => session.close());
      const refusal = opts.authorize?.(session);
      if (refusal !== undefined) {
        session.refuse(refusal.code, refusal.message, refusal.status);
        return;
      }
      call.on('data', (message: NodeMessage) => {
        session.received.push(message);
        if (message.hello !== undefined) {
          if (opts.answerHello === false) return;
          session.send({
            helloAck: {
              accepted: true,
              serverProtocolVersion: PROTOCOL_VERSION,
              sessionId: `session-${session.index}`,
              serverTime: BigInt(Math.round(opts.serverTime?.() ?? Date.now())),
              heartbeatIntervalMs: opts.heartbeatIntervalMs ?? 100,
            },
          });
          opts.onWelcome?.(session);
        } else {
          opts.onMessage?.(session, message);
        }
      });
    },
  };

  // Outside the ephemeral range, so nothing else takes it while the gateway is down for a restart.
  let port = await freePort();
  const bind = async (): Promise<void> => {
    const next = new grpc.Server();
    next.addService(NodeControlService, impl);
    const credentials = grpc.ServerCredentials.createSsl(null, [{ private_key: Buffer.from(cert.keyPem), cert_chain: Buffer.from(cert.certPem) }], false);
    port = await new Promise<number>((resolve, reject) => {
      next.bindAsync(`127.0.0.1:${port}`, credentials, (err, bound) => (err === null ? resolve(bound) : reject(err)));
    });
    server = next;
  };
  await bind();
  t.teardown(() => server?.forceShutdown());

  const gateway: FakeGateway = {
    get port() {
      return port;
    },
    get target() {
      return `127.0.0.1:${port}`;
    },
    ca,
    sessions,
    waitForSession: (index) => waitFor(() => sessions[index], { what: `gateway session #${index}`, timeoutMs: 20_000 }),
    waitForMessage: (session, pick, what) => waitFor(() => session.received.find(pick), { what, timeoutMs: 20_000 }),
    waitForConfigAck: (session, version) =>
      waitFor(() => session.received.find((m) => m.configAck?.version === BigInt(version))?.configAck, { what: `the config ack of version ${version}`, timeoutMs: 20_000 }),
    stop() {
      server?.forceShutdown();
      server = undefined;
      for (const s of sessions) s.ended = true;
    },
    restart: bind,
  };
  return gateway;
}

export function newCredential(validForMs = 30 * 86_400_000): StoredCredential {
  const id = randomUUID();
  return { id, secret: `${id}.${randomBytes(32).toString('base64url')}`, expiresAt: new Date(Date.now() + validForMs).toISOString() };
}

export interface EnrolledState {
  dir: string;
  store: StateStore;
  identity: NodeIdentity;
  credentials: CredentialFile;
}

/** A state dir as `zenova-node enroll` leaves it, pointing at `gateway`. */
export async function writeEnrolledState(
  dir: string,
  gateway: { target: string; ca: TestCa },
  opts: { serverName?: string; credentials?: CredentialFile; configSigningPublicKeyPem?: string } = {},
): Promise<EnrolledState> {
  const store = await openStateStore(dir, { create: true });
  const identity: NodeIdentity = {
    nodeId: randomUUID(),
    nodeName: 'edge-test',
    controlPlaneUrl: 'https://control.example:8080',
    gateway: { target: gateway.target, serverName: opts.serverName ?? 'localhost', caPem: gateway.ca.certPem },
    // A test that pushes bundles pins its own throwaway key; the default's private half is discarded.
    configSigningPublicKeyPem: opts.configSigningPublicKeyPem ?? CONFIG_SIGNING_PUBLIC_KEY_PEM,
    enrolledAt: new Date().toISOString(),
  };
  const credentials = opts.credentials ?? { current: newCredential() };
  await saveCredentials(store, credentials);
  await saveIdentity(store, identity);
  return { dir: store.dir, store, identity, credentials };
}
