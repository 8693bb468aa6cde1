// Shared set-up for the node-gateway tests: a migrated database, enrolled nodes with credentials
// (made by the nodes module itself), real gateway servers over TLS (with the installation's
// config-signing key), and a raw grpc-js client that plays the node and records everything the
// gateway sends. Config pushes are kept apart from the other messages (`configPushes`,
// `nextConfigPush`), so tests about the session itself see the stream as before config existed.
import { randomBytes } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import type pg from 'pg';
import { loadConfigSigningKey, type ConfigSigningKey } from '../../control-plane/src/config/signing-key.js';
import { createSecretBox, type SecretBox } from '../../control-plane/src/crypto/secret-box.js';
import { migrate } from '../../control-plane/src/db/migrate.js';
import { createPool } from '../../control-plane/src/db/pool.js';
import { startGatewayServer, type GatewayServer, type GatewayServerOptions } from '../../control-plane/src/gateway/server.js';
import { issueCredential, type CredentialTimings } from '../../control-plane/src/nodes/credentials.js';
import { createNode } from '../../control-plane/src/nodes/node-admin.js';
import { recordEnrollment } from '../../control-plane/src/nodes/node-repository.js';
import { nodeCreateSchema } from '../../control-plane/src/nodes/node-validation.js';
import type { Settings } from '../../control-plane/src/settings.js';
import {
  NODE_CREDENTIAL_METADATA_KEY,
  NODE_ID_METADATA_KEY,
  NodeControlClient,
  PROTOCOL_VERSION,
  type ConfigPush,
  type ControlMessage,
  type ErrorDetail,
  type Hello,
  type NodeMessage,
} from '../../proto/src/index.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';
import { waitFor } from '../fixtures/wait-for.js';
import { boundedPoolEnd, captureLogger, testSettings, type CapturedLogger } from './helpers.js';

export interface HasTeardown { teardown(fn: () => unknown): void }

const DEADLINE_MS = 15_000;

export interface GatewayIdentity { certPem: string; keyPem: string; caPem: string }

/** A CA and a server certificate for localhost / 127.0.0.1, as the gateway would have. */
export async function gatewayIdentity(): Promise<GatewayIdentity> {
  const ca = await createTestCa();
  const cert = await issueServerCert(ca, { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
  return { certPem: cert.certPem, keyPem: cert.keyPem, caPem: ca.certPem };
}

/** A pool on `databaseUrl`, ended at teardown. */
export function testPool(t: HasTeardown, databaseUrl: string): pg.Pool {
  const pool = createPool({ databaseUrl });
  t.teardown(boundedPoolEnd(pool));
  return pool;
}

export async function migratedPool(t: HasTeardown, databaseUrl: string): Promise<pg.Pool> {
  const pool = testPool(t, databaseUrl);
  await migrate(pool);
  return pool;
}

export function gatewaySettings(databaseUrl: string, nodes: Partial<Settings['nodes']> = {}, faults: Partial<Settings['faults']> = {}): Settings {
  const base = testSettings(databaseUrl);
  return { ...base, nodes: { ...base.nodes, ...nodes }, faults: { ...base.faults, ...faults } };
}

export function timingsOf(settings: Settings): CredentialTimings {
  return {
    validityMs: settings.nodes.credentialValidityMs,
    rotateAfterMs: settings.nodes.credentialRotateAfterMs,
    handoverMs: settings.nodes.credentialHandoverMs,
  };
}

/** The ZENOVA_SECRET_ENC_KEY of every gateway this test process starts (one installation per database). */
export const harnessSecretBox: SecretBox = createSecretBox(randomBytes(32));

/** The database's config-signing key (made on first use), opened with the harness key. */
export function harnessSigningKey(pool: pg.Pool): Promise<ConfigSigningKey> {
  return loadConfigSigningKey(pool, harnessSecretBox);
}

export interface TestGateway {
  server: GatewayServer;
  signingKey: ConfigSigningKey;
  log: CapturedLogger;
  /** Moves the gateway's credential clock forward (or back). */
  shiftClock(ms: number): void;
}

export async function startTestGateway(
  t: HasTeardown,
  opts: {
    pool: pg.Pool; settings: Settings; identity: GatewayIdentity; helloDeadlineMs?: number;
    configAckTimeoutMs?: number; configRetryAfterMs?: number;
  },
): Promise<TestGateway> {
  const log = captureLogger({ logLevel: 'debug' });
  let offsetMs = 0;
  const signingKey = await harnessSigningKey(opts.pool);
  const options: GatewayServerOptions = {
    pool: opts.pool,
    logger: log.logger,
    settings: opts.settings,
    identity: opts.identity,
    signingKey,
    secretBox: harnessSecretBox,
    now: () => new Date(Date.now() + offsetMs),
  };
  if (opts.helloDeadlineMs !== undefined) options.helloDeadlineMs = opts.helloDeadlineMs;
  if (opts.configAckTimeoutMs !== undefined) options.configAckTimeoutMs = opts.configAckTimeoutMs;
  if (opts.configRetryAfterMs !== undefined) options.configRetryAfterMs = opts.configRetryAfterMs;
  const server = await startGatewayServer(options);
  t.teardown(() => server.close());
  return { server, signingKey, log, shiftClock: (ms) => { offsetMs += ms; } };
}

export interface EnrolledNode { id: string; name: string; credentialId: string; credential: string }

let nodeCounter = 0;

/** Creates and enrolls a node through the nodes module and issues its first credential. */
export async function enrolledNode(pool: pg.Pool, settings: Settings, opts: { issuedAt?: Date } = {}): Promise<EnrolledNode> {
  nodeCounter += 1;
  const name = `gw-node-${process.pid % 10_000}-${nodeCounter}`;
  const input = nodeCreateSchema.parse({ name, surfaces: ['model'], address: '10.0.0.5:8080', controlPlaneUrl: 'https://cp.example.test' });
  const { node } = await createNode(pool, input, settings.nodes.installTokenTtlMs);
  await recordEnrollment(pool, node.id, { hostname: 'enrolled-host', arch: 'x64', version: '0.0.9', protocolVersion: PROTOCOL_VERSION });
  const issued = await issueCredential(pool, node.id, timingsOf(settings), opts.issuedAt);
  return { id: node.id, name, credentialId: issued.credentialId, credential: issued.credential };
}

export function helloFor(node: { id: string; name: string }, overrides: Partial<Hello> = {}): NodeMessage {
  return {
    hello: {
      nodeId: node.id,
      nodeName: node.name,
      version: '0.1.0',
      protocolVersion: PROTOCOL_VERSION,
      hostname: 'edge-host-1',
      arch: 'arm64',
      appliedConfigVersion: 0n,
      ...overrides,
    },
  };
}

/** One node-side control stream, recording what arrives and how the call ends. */
export class NodeConnection {
  /** Everything but config pushes, in arrival order. */
  readonly received: ControlMessage[] = [];
  /** Config pushes, in arrival order. */
  readonly configPushes: ConfigPush[] = [];
  /** Settles with the call's final status, whatever it is. */
  readonly status: Promise<grpc.StatusObject>;
  private readonly stream: grpc.ClientDuplexStream<NodeMessage, ControlMessage>;
  private cursor = 0;
  private pushCursor = 0;
  private ended: grpc.StatusObject | undefined;

  constructor(t: HasTeardown, port: number, caPem: string, metadata: { nodeId?: string; credential?: string }) {
    // Dial the IP, verify the name "localhost" (an IP as TLS SNI is deprecated in Node).
    const client = new NodeControlClient(`127.0.0.1:${port}`, grpc.credentials.createSsl(Buffer.from(caPem)), {
      'grpc.ssl_target_name_override': 'localhost',
    });
    t.teardown(() => client.close());
    const md = new grpc.Metadata();
    if (metadata.nodeId !== undefined) md.set(NODE_ID_METADATA_KEY, metadata.nodeId);
    if (metadata.credential !== undefined) md.set(NODE_CREDENTIAL_METADATA_KEY, metadata.credential);
    this.stream = client.connect(md);
    t.teardown(() => this.stream.cancel());
    this.stream.on('data', (message: ControlMessage) => {
      if (message.configPush !== undefined) this.configPushes.push(message.configPush);
      else this.received.push(message);
    });
    this.stream.on('error', () => undefined); // reported through `status`
    this.status = new Promise((resolve) => {
      this.stream.on('status', (status: grpc.StatusObject) => {
        this.ended = status;
        resolve(status);
      });
    });
  }

  send(message: NodeMessage): void {
    this.stream.write(message);
  }

  /** Half-closes the node's side. */
  end(): void {
    this.stream.end();
  }

  /** The next message from the gateway; fails if the call ends first. */
  async next(what: string): Promise<ControlMessage> {
    const message = await waitFor(() => {
      const next = this.received[this.cursor];
      if (next !== undefined) return next;
      if (this.ended !== undefined) {
        throw new Error(`the call ended (${grpc.status[this.ended.code]}: ${this.ended.details}) before ${what}`);
      }
      return undefined;
    }, { timeoutMs: DEADLINE_MS, intervalMs: 10, what });
    this.cursor += 1;
    return message;
  }

  /** The next config push; fails if the call ends first. */
  async nextConfigPush(what: string, timeoutMs = DEADLINE_MS): Promise<ConfigPush> {
    const push = await waitFor(() => {
      const next = this.configPushes[this.pushCursor];
      if (next !== undefined) return next;
      if (this.ended !== undefined) {
        throw new Error(`the call ended (${grpc.status[this.ended.code]}: ${this.ended.details}) before ${what}`);
      }
      return undefined;
    }, { timeoutMs, intervalMs: 5, what });
    this.pushCursor += 1;
    return push;
  }

  /** Answers a push as a node would: applied, or refused with a reason. */
  ackConfig(version: bigint, error?: ErrorDetail): void {
    this.send({ configAck: { version, ok: error === undefined, error } });
  }

  async finalStatus(what: string): Promise<grpc.StatusObject> {
    return waitFor(() => this.ended, { timeoutMs: DEADLINE_MS, intervalMs: 10, what });
  }
}

export function connectNode(t: HasTeardown, port: number, caPem: string, metadata: { nodeId?: string; credential?: string }): NodeConnection {
  return new NodeConnection(t, port, caPem, metadata);
}

/** Connects `node`, says hello, and returns once HelloAck arrived. */
export async function liveSession(t: HasTeardown, port: number, caPem: string, node: EnrolledNode, credential = node.credential): Promise<{ conn: NodeConnection; ack: ControlMessage }> {
  const conn = connectNode(t, port, caPem, { nodeId: node.id, credential });
  conn.send(helloFor(node));
  const ack = await conn.next('HelloAck');
  if (ack.helloAck === undefined) throw new Error(`expected HelloAck, got ${JSON.stringify(Object.keys(ack))}: ${ack.refusal?.error?.message ?? ''}`);
  return { conn, ack };
}

/** Waits for a refusal and the call's end; returns both for assertions. */
export async function refusalOf(conn: NodeConnection, what: string): Promise<{ code: string; message: string; retryable: boolean; status: grpc.StatusObject }> {
  const message = await conn.next(`${what} refusal`);
  const error = message.refusal?.error;
  if (error === undefined) throw new Error(`expected a refusal, got ${JSON.stringify(Object.keys(message))}`);
  const status = await conn.finalStatus(`${what} status`);
  return { code: error.code, message: error.message, retryable: error.retryable, status };
}

/** Runs `query` until its first row satisfies `ready`; returns that row. */
export async function waitForRow<R extends pg.QueryResultRow>(pool: pg.Pool, what: string, query: string, params: unknown[], ready: (row: R) => boolean): Promise<R> {
  return waitFor(async () => {
    const { rows } = await pool.query<R>(query, params);
    const row = rows[0];
    return row !== undefined && ready(row) ? row : undefined;
  }, { timeoutMs: DEADLINE_MS, what });
}
