/**
 * The node gateway: the grpc-js server nodes dial (TLS, server certificate only; nodes prove who
 * they are with credential metadata), one NodeSession per Connect call, and the listener that hears
 * every replica's news: node events end sessions (node deleted, credentials revoked), and config
 * changes are pushed to every live session (signed bundles from one ConfigPublisher per gateway);
 * credit top-ups and config changes wake the stream handlers (leases are reconsidered at once).
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import type { Socket } from 'node:net';
import { createNodeStreamHandlers } from './node-stream-handlers.js';
import * as grpc from '@grpc/grpc-js';
import type pg from 'pg';
import type pino from 'pino';
import { NodeControlService, type NodeControlServer } from '../../../proto/src/index.js';
import { ConfigPublisher } from '../config/config-publisher.js';
import type { ConfigSigningKey } from '../config/signing-key.js';
import type { SecretBox } from '../crypto/secret-box.js';
import type { Settings } from '../settings.js';
import { DEFAULT_CONFIG_ACK_TIMEOUT_MS, DEFAULT_CONFIG_BUILD_RETRY_MS, DEFAULT_CONFIG_RETRY_AFTER_MS } from './config-sync.js';
import { startNodeEventListener } from './node-event-listener.js';
import { refusalMessage, refusalStatus } from './refusal.js';
import { NodeSession, type ControlCall } from './session.js';
import { SessionRegistry } from './session-registry.js';

export interface GatewayServer {
  port: number;
  close(): Promise<void>;
  /** Live sessions (past HelloAck). */
  sessionCount(): number;
}

export interface GatewayServerOptions {
  pool: pg.Pool;
  logger: pino.Logger;
  settings: Settings;
  identity: { certPem: string; keyPem: string; caPem: string };
  /** Signs the config bundles pushed to nodes. */
  signingKey: ConfigSigningKey;
  /** Opens the upstream secrets that go into bundles. */
  secretBox: SecretBox;
  /** A config push not acknowledged within this long may be sent again (default 30 s). */
  configAckTimeoutMs?: number;
  /** How long to wait before re-pushing a version a node refused as retryable (default 30 s). */
  configRetryAfterMs?: number;
  /** How long a node has to send Hello after connecting (default 10 s). */
  helloDeadlineMs?: number;
  /** A connection on which no call opened this long after it was accepted is cut (default FIRST_CALL_TIMEOUT_MS). */
  firstCallTimeoutMs?: number;
  /** A connection with no call open this long is closed (default IDLE_CONNECTION_CLOSE_MS). */
  idleConnectionCloseMs?: number;
  /** Clock for credential decisions (default: the system clock); tests move it past windows. */
  now?: () => Date;
}

export const DEFAULT_HELLO_DEADLINE_MS = 10_000;
// Rotation is checked at least this often, and at most this rarely (issue 3: min(rotateAfter, 60 s)).
const MIN_ROTATION_CHECK_MS = 1_000;
const MAX_ROTATION_CHECK_MS = 60_000;
// Record batches are the largest messages; anything beyond this is refused by grpc-js itself.
const MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024;
const MAX_SEND_MESSAGE_BYTES = 16 * 1024 * 1024;
// Sessions get this long to end cleanly on close before connections are cut.
const SHUTDOWN_GRACE_MS = 5_000;
/**
 * Anyone who reaches the port can open connections and send nothing; held forever, they would use
 * up file descriptors. A connection with no call open this long is closed: grpc-js counts open
 * calls, and a node's control stream is one, so a live node is never cut.
 */
export const IDLE_CONNECTION_CLOSE_MS = 5 * 60_000;
/**
 * A connection on which no call opened this long after it was accepted is cut: one that never
 * finishes its TLS handshake or never sends the HTTP/2 preface included. A node's TLS handshake,
 * preface and Connect call take far less on any working link.
 */
export const FIRST_CALL_TIMEOUT_MS = 20_000;
// grpc-js closes an idle connection gracefully (GOAWAY, then its side of the socket), which a peer
// that never reads holds open; the socket is cut this long after the idle bound instead.
const IDLE_CLOSE_GRACE_MS = 10_000;
// Node publishes every socket a net.Server accepts here: the only view of the raw sockets beneath grpc-js.
const ACCEPTED_SOCKETS_CHANNEL = 'net.server.socket';

interface GuardedConnection {
  socket: Socket;
  openCalls: number;
  timer: NodeJS.Timeout | undefined;
}

/**
 * Cuts this gateway's connections (those accepted on the port `watch` names) that carry no call:
 * none opened within `firstCallMs`, or none open for `idleMs` plus a grace. Calls are matched to
 * their connection by the peer address and port, as grpc-js reports them (`call.getPeer()`).
 */
function guardConnections(bounds: { firstCallMs: number; idleMs: number }): {
  watch(port: number): void;
  callOpened(call: ControlCall): void;
  close(): void;
} {
  let port: number | undefined;
  const byPeer = new Map<string, GuardedConnection>();
  const forget = (key: string, conn: GuardedConnection): void => {
    clearTimeout(conn.timer);
    if (byPeer.get(key) === conn) byPeer.delete(key);
  };
  const arm = (key: string, conn: GuardedConnection, ms: number): void => {
    clearTimeout(conn.timer);
    conn.timer = setTimeout(() => {
      conn.socket.destroy();
      forget(key, conn);
    }, ms);
    conn.timer.unref();
  };
  const onAccepted = (message: unknown): void => {
    const { socket } = message as { socket: Socket };
    if (socket.localPort !== port || socket.remoteAddress === undefined || socket.destroyed) return;
    const key = `${socket.remoteAddress}:${socket.remotePort}`;
    const conn: GuardedConnection = { socket, openCalls: 0, timer: undefined };
    byPeer.set(key, conn);
    arm(key, conn, bounds.firstCallMs);
    socket.once('close', () => forget(key, conn));
  };
  return {
    watch(bound) {
      port = bound;
      diagnosticsChannel.subscribe(ACCEPTED_SOCKETS_CHANNEL, onAccepted);
    },
    callOpened(call) {
      const key = call.getPeer();
      const conn = byPeer.get(key);
      if (conn === undefined) return;
      conn.openCalls += 1;
      clearTimeout(conn.timer);
      let ended = false;
      const callEnded = (): void => {
        if (ended) return;
        ended = true;
        conn.openCalls -= 1;
        if (conn.openCalls === 0 && byPeer.get(key) === conn) arm(key, conn, bounds.idleMs + IDLE_CLOSE_GRACE_MS);
      };
      call.once('close', callEnded);
      call.once('cancelled', callEnded);
    },
    close() {
      if (port !== undefined) diagnosticsChannel.unsubscribe(ACCEPTED_SOCKETS_CHANNEL, onAccepted);
      for (const conn of byPeer.values()) clearTimeout(conn.timer);
      byPeer.clear();
    },
  };
}

function bindAddress(listen: Settings['gateway']['listen']): string {
  return `${listen.host.includes(':') ? `[${listen.host}]` : listen.host}:${listen.port}`;
}

export async function startGatewayServer(opts: GatewayServerOptions): Promise<GatewayServer> {
  const { pool, settings } = opts;
  const logger = opts.logger.child({ component: 'gateway' });
  const registry = new SessionRegistry();
  const open = new Set<NodeSession>();
  let closing = false;
  let dropsLeft = settings.faults.dropRotationReplies;
  if (dropsLeft > 0) logger.warn({ dropRotationReplies: dropsLeft }, 'fault injection on: rotation replies will be dropped');

  const publisher = new ConfigPublisher({ pool, secretBox: opts.secretBox, signingKey: opts.signingKey });
  const configChanged = (): void => {
    for (const session of open) session.configChanged();
  };

  // Each part names itself once (`component`): pino repeats a key bound twice, so they get the root logger.
  const handlers = createNodeStreamHandlers({ pool, logger: opts.logger, settings });
  // A top-up or a config change (a new account or key, an account reactivated) may let a node
  // serve someone it could not: its leases are reconsidered now, not at the next refresh.
  const wakeHandlers = (): void => {
    for (const handler of handlers) handler.wake?.();
  };

  const listener = await startNodeEventListener({
    databaseUrl: settings.databaseUrl,
    logger: opts.logger,
    onEvent: (event) => registry.dispatch(event),
    // Every notification fans out (cheap when a session is current): a session may be behind a
    // version this gateway already knew of from a bundle it built for another node.
    onConfigChanged: (version) => {
      publisher.noteVersion(version);
      configChanged();
      wakeHandlers();
    },
    onCreditChanged: wakeHandlers,
    // Events sent while the connection was down are lost: re-check every session instead (not
    // only live ones: one waiting for its hello would go live on a credential revoked meanwhile).
    onReconnect: () => {
      for (const session of open) session.recheck();
      wakeHandlers();
      publisher.latestVersion().then(configChanged, (err: unknown) => {
        logger.warn({ err }, 'could not read the config version after reconnecting; the next change or heartbeat catches up');
      });
    },
  });

  const sessionContext = {
    pool,
    logger,
    registry,
    handlers,
    credentialTimings: {
      validityMs: settings.nodes.credentialValidityMs,
      rotateAfterMs: settings.nodes.credentialRotateAfterMs,
      handoverMs: settings.nodes.credentialHandoverMs,
    },
    heartbeatIntervalMs: settings.nodes.heartbeatIntervalMs,
    helloDeadlineMs: opts.helloDeadlineMs ?? DEFAULT_HELLO_DEADLINE_MS,
    rotationCheckMs: Math.max(MIN_ROTATION_CHECK_MS, Math.min(settings.nodes.credentialRotateAfterMs, MAX_ROTATION_CHECK_MS)),
    now: opts.now ?? (() => new Date()),
    dropRotationReply: (): boolean => {
      if (dropsLeft <= 0) return false;
      dropsLeft -= 1;
      return true;
    },
    onEnded: (session: NodeSession) => open.delete(session),
    config: {
      publisher,
      ackTimeoutMs: opts.configAckTimeoutMs ?? DEFAULT_CONFIG_ACK_TIMEOUT_MS,
      retryAfterMs: opts.configRetryAfterMs ?? DEFAULT_CONFIG_RETRY_AFTER_MS,
      buildRetryMs: DEFAULT_CONFIG_BUILD_RETRY_MS,
    },
  };

  const idleConnectionCloseMs = opts.idleConnectionCloseMs ?? IDLE_CONNECTION_CLOSE_MS;
  const connections = guardConnections({ firstCallMs: opts.firstCallTimeoutMs ?? FIRST_CALL_TIMEOUT_MS, idleMs: idleConnectionCloseMs });
  const service: NodeControlServer = {
    connect(call: ControlCall) {
      connections.callOpened(call);
      if (closing) {
        const message = 'the control plane is shutting down; reconnect shortly';
        call.write(refusalMessage('SERVER_SHUTTING_DOWN', message));
        call.emit('error', { ...refusalStatus('SERVER_SHUTTING_DOWN', message), metadata: new grpc.Metadata() });
        return;
      }
      const session = new NodeSession(call, sessionContext);
      open.add(session);
      session.start();
    },
  };

  const server = new grpc.Server({
    'grpc.max_receive_message_length': MAX_RECEIVE_MESSAGE_BYTES,
    'grpc.max_send_message_length': MAX_SEND_MESSAGE_BYTES,
    // Find nodes that vanished without closing (power loss, NAT timeout) instead of holding them.
    'grpc.keepalive_time_ms': 30_000,
    'grpc.keepalive_timeout_ms': 10_000,
    // Nodes ping to keep NAT mappings alive; tolerate that down to every 10 s.
    'grpc.http2.min_ping_interval_without_data_ms': 10_000,
    'grpc.max_connection_idle_ms': idleConnectionCloseMs,
  });
  server.addService(NodeControlService, service);
  const credentials = grpc.ServerCredentials.createSsl(
    null,
    [{ private_key: Buffer.from(opts.identity.keyPem), cert_chain: Buffer.from(opts.identity.certPem) }],
    false,
  );
  const address = bindAddress(settings.gateway.listen);
  let port: number;
  try {
    port = await new Promise<number>((resolve, reject) => {
      server.bindAsync(address, credentials, (err, bound) => (err === null ? resolve(bound) : reject(err)));
    });
  } catch (err) {
    server.forceShutdown();
    await listener.close();
    throw new Error(`cannot listen on ${address} for the node gateway: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  logger.debug({ address: bindAddress({ host: settings.gateway.listen.host, port }) }, 'node gateway bound');
  connections.watch(port);

  let closed: Promise<void> | undefined;
  return {
    port,
    sessionCount: () => registry.size,
    close: () => {
      closed ??= (async () => {
        closing = true;
        const sessions = [...open];
        for (const session of sessions) session.end('SERVER_SHUTTING_DOWN', 'the control plane is shutting down; reconnect shortly');
        await new Promise<void>((resolve) => {
          const timer = setTimeout(() => {
            logger.warn('node gateway connections did not close in time; cutting them');
            server.forceShutdown();
            resolve();
          }, SHUTDOWN_GRACE_MS);
          timer.unref();
          server.tryShutdown(() => {
            clearTimeout(timer);
            resolve();
          });
        });
        // Database work a session had started finishes before the caller may end the pool.
        await Promise.all(sessions.map((session) => session.idle()));
        connections.close();
        await listener.close();
        logger.info('node gateway stopped');
      })();
      return closed;
    },
  };
}
