/**
 * One control session: open NodeControl.Connect over TLS with the node's credential as metadata,
 * say hello (with the applied config version), send heartbeats once welcomed, store rotated
 * credentials before acknowledging them, hand config pushes to the applier and acknowledge each
 * with its outcome, and report how the session ended. Reconnecting is not this module's business (connect-loop.ts).
 */
import * as grpc from '@grpc/grpc-js';
import {
  NODE_CREDENTIAL_METADATA_KEY,
  NODE_ID_METADATA_KEY,
  PROTOCOL_VERSION,
  describeProtocolMismatch,
  isCompatibleProtocol,
  refusalCodeOfStatusDetails,
} from '../../../proto/src/index.js';
import type { ConfigPush, ControlMessage, CredentialRotation, NodeMessage } from '../../../proto/src/index.js';
import type { Logger } from '../logger.js';
import { oneLine } from '../one-line.js';
import { storedCredentialSchema } from '../state/credential-store.js';
import type { StoredCredential } from '../state/credential-store.js';
import type { NodeIdentity } from '../state/identity.js';
import { classifyTlsFailure } from '../tls/tls-failure.js';
import type { ControlChannel } from './control-channel.js';
import { createGatewayClient, gatewayProxy, parseGatewayTarget } from './gateway-channel.js';
import type { ProxyServer } from '../net/proxy-policy.js';
import { ProxyConnectError, openTunnel } from '../net/proxy-tunnel.js';

export const DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000;
const MIN_HEARTBEAT_INTERVAL_MS = 100;
// The control plane refuses to ask for more (its settings); the cap guards against any other answer.
const MAX_HEARTBEAT_INTERVAL_MS = 10 * 60_000;
const DEFAULT_HELLO_TIMEOUT_MS = 30_000;
const MAX_PEER_MESSAGE_CHARS = 500;

/** The node's live figures for a heartbeat (plain numbers; converted to int64 on the wire). */
export interface HeartbeatFigures {
  requests5m: number;
  errors5m: number;
  spoolBytes: number;
  backfillBacklog: number;
  appliedConfigVersion: number;
  /** True when the node serves traffic. */
  ready: boolean;
}

/** What the hello says of the node's config besides the served version (HeartbeatFigures.appliedConfigVersion). */
export interface HelloConfigFacts {
  /** The highest version applied under this enrollment (config-applied-version.json); 0: none. */
  highestAppliedConfigVersion: number;
  /** configContentSha256 of the served bundle; undefined when the served version counts as 0. */
  appliedConfigContentSha256: Uint8Array | undefined;
}

/** What the node says about itself in its hello. */
export interface NodeFacts {
  version: string;
  hostname: string;
  arch: string;
  /** PROTOCOL_VERSION unless a test pretends to be another build. */
  protocolVersion?: number;
}

/** A rotation deliberately left unstored (and so unacknowledged), with why. */
export interface RotationNotStored {
  stored: false;
  reason: string;
}

/** How a config push went, for its ConfigAck. */
export type ConfigPushResult = { ok: true } | { ok: false; code: string; message: string; retryable: boolean };

export interface SessionInfo {
  sessionId: string;
  serverProtocolVersion: number;
  serverTimeMs: number;
  /** Hello written → HelloAck read (ms, includes connecting): server_time was read within it. */
  helloRoundTripMs: number;
  heartbeatIntervalMs: number;
  /** The credential this session authenticated with. */
  credentialId: string;
}

export interface SessionOptions {
  identity: NodeIdentity;
  credential: StoredCredential;
  facts: NodeFacts;
  figures: () => HeartbeatFigures;
  /** Read for each hello: after a database restore the control plane counts versions past these. */
  helloConfig?: () => HelloConfigFacts;
  /**
   * Makes `next` the node's current credential, keeping `inUse` as previous. Must resolve only once
   * the file is durable: the acknowledgement is sent after it resolves, never before. Resolving
   * with RotationNotStored (credential.json changed under the session), or throwing (the write
   * failed), leaves the rotation unacknowledged and the session up.
   */
  storeRotatedCredential: (next: StoredCredential, inUse: StoredCredential) => Promise<void | RotationNotStored>;
  /**
   * Verifies and applies a pushed bundle; resolves when it is applied (cached and swapped) or
   * refused. Pushes are handed over one at a time, in arrival order. Without it, pushes are refused.
   */
  onConfigPush?: (push: ConfigPush) => Promise<ConfigPushResult>;
  onEstablished?: (info: SessionInfo) => void;
  /** Backfill, leases: told when the session is up and down, offered the messages handled nowhere else. */
  channels?: readonly ControlChannel[];
  logger: Logger;
  /** Aborting ends the session (reason 'stopped'). */
  signal?: AbortSignal;
  helloTimeoutMs?: number;
}

export interface SessionEnd {
  /** refused: the control plane said no (code = its refusal code); disconnected: the link failed. */
  reason: 'refused' | 'disconnected' | 'stopped';
  code: string;
  /** Operator-readable, never a secret. */
  message: string;
  /** Whether a HelloAck was received. */
  established: boolean;
  sessionId?: string;
  /** How long the session was established, 0 when it never was. */
  establishedMs: number;
}

function clampInterval(ms: number): number {
  if (!Number.isFinite(ms) || ms <= 0) return DEFAULT_HEARTBEAT_INTERVAL_MS;
  return Math.min(MAX_HEARTBEAT_INTERVAL_MS, Math.max(MIN_HEARTBEAT_INTERVAL_MS, ms));
}

function int64(value: number): bigint {
  return Number.isFinite(value) && value > 0 ? BigInt(Math.trunc(value)) : 0n;
}

/** Peer text goes to logs and status: one line, bounded. */
function peerText(text: string): string {
  return oneLine(text, MAX_PEER_MESSAGE_CHARS);
}

/** A rotation as the node stores it; undefined when the message is not usable. */
function parseRotation(rotation: CredentialRotation): StoredCredential | undefined {
  const expiresAtMs = Number(rotation.expiresAt);
  if (!Number.isSafeInteger(expiresAtMs) || expiresAtMs <= 0) return undefined;
  const parsed = storedCredentialSchema.safeParse({
    id: rotation.credentialId,
    secret: rotation.credential,
    expiresAt: new Date(expiresAtMs).toISOString(),
  });
  return parsed.success ? parsed.data : undefined;
}

/** grpc-js's text without its empty parts ("Last error: undefined.", a bare "Resolution note:"). */
function cleanDetails(details: string): string {
  return details
    .replace(/\s*Last error: (?:undefined|null)\.?/g, '')
    .replace(/\s*Resolution note:\s*$/, '')
    .trim();
}

/** How long the check of the proxy route may take after a link through it failed. */
const PROXY_CHECK_TIMEOUT_MS = 5_000;

/**
 * A link through a proxy that never came up: grpc-js does not say what the proxy answered, so ask
 * it once more ourselves (the CONNECT alone, no TLS) and name the proxy and its answer.
 */
async function describeProxiedFailure(proxy: ProxyServer, gateway: NodeIdentity['gateway'], details: string): Promise<{ code: string; message: string }> {
  const { host, port } = parseGatewayTarget(gateway.target);
  try {
    const socket = await openTunnel(proxy, host, port, PROXY_CHECK_TIMEOUT_MS);
    socket.destroy();
  } catch (err) {
    if (err instanceof ProxyConnectError) return { code: 'GATEWAY_PROXY', message: `cannot reach the gateway ${gateway.target} through the proxy (from ${proxy.source}): ${err.message}` };
  }
  return { code: 'GATEWAY_UNREACHABLE', message: `cannot reach the gateway ${gateway.target} through the proxy ${proxy.label} (from ${proxy.source})${details !== '' ? `: ${details}` : ''}` };
}

function describeFailure(status: grpc.StatusObject, established: boolean): { code: string; message: string } {
  const details = peerText(cleanDetails(status.details));
  if (!established) {
    switch (classifyTlsFailure(details)) {
      case 'untrusted':
        return { code: 'GATEWAY_TLS_UNTRUSTED', message: `the gateway's certificate is not trusted: ${details}` };
      case 'name-mismatch':
        return { code: 'GATEWAY_TLS_NAME_MISMATCH', message: `host name mismatch on the gateway's certificate: ${details}` };
      case 'expired':
        return { code: 'GATEWAY_TLS_EXPIRED', message: `the gateway's certificate is not valid now: ${details}` };
      default:
        break;
    }
  }
  if (status.code === grpc.status.UNAVAILABLE) {
    return established ? { code: 'CONNECTION_LOST', message: `the control session was cut: ${details}` } : { code: 'GATEWAY_UNREACHABLE', message: details };
  }
  return { code: grpc.status[status.code] ?? `GRPC_${status.code}`, message: details };
}

export function runSession(opts: SessionOptions): Promise<SessionEnd> {
  const { identity, logger } = opts;
  const protocolVersion = opts.facts.protocolVersion ?? PROTOCOL_VERSION;
  let proxy: ProxyServer | undefined;
  try {
    proxy = gatewayProxy(identity.gateway);
  } catch (err) {
    // An unusable proxy variable: never fall back to a direct link the operator did not ask for.
    return Promise.resolve({ reason: 'disconnected', code: 'GATEWAY_PROXY', message: (err as Error).message, established: false, establishedMs: 0 });
  }
  const client = createGatewayClient(identity.gateway, proxy);
  const metadata = new grpc.Metadata();
  metadata.set(NODE_ID_METADATA_KEY, identity.nodeId);
  metadata.set(NODE_CREDENTIAL_METADATA_KEY, opts.credential.secret);

  return new Promise<SessionEnd>((resolve) => {
    const call = client.connect(metadata);
    // The hello is written at the end of this tick; its round trip bounds when server_time was read.
    const helloSentAt = performance.now();
    let established = false;
    let establishedAt = 0;
    let sessionId: string | undefined;
    let refusal: { code: string; message: string } | undefined;
    let localEnd: { reason: SessionEnd['reason']; code: string; message: string } | undefined;
    let heartbeatTimer: NodeJS.Timeout | undefined;
    // The credential the node would use next: the one it connected with, then each stored rotation.
    let held = opts.credential;
    // Rotations are handled one at a time, in arrival order; so are config pushes.
    let rotations: Promise<void> = Promise.resolve();
    // The rotation whose failed store was warned about (the next failures of it log at debug).
    let storeFailureWarnedFor: string | undefined;
    let configPushes: Promise<void> = Promise.resolve();
    let finished = false;

    const endLocally = (reason: SessionEnd['reason'], code: string, message: string): void => {
      localEnd ??= { reason, code, message };
      call.cancel();
    };

    const helloTimer = setTimeout(
      () => endLocally('disconnected', 'HELLO_TIMEOUT', 'the gateway did not answer the hello in time'),
      opts.helloTimeoutMs ?? DEFAULT_HELLO_TIMEOUT_MS,
    );
    const onAbort = (): void => endLocally('stopped', 'STOPPED', 'the node is stopping');
    if (opts.signal?.aborted === true) queueMicrotask(onAbort);
    else opts.signal?.addEventListener('abort', onAbort, { once: true });

    const send = (message: NodeMessage): boolean => {
      if (finished) return false;
      call.write(message);
      return true;
    };
    const channels = opts.channels ?? [];
    const sendHeartbeat = (): void => {
      const figures = opts.figures();
      send({
        heartbeat: {
          sentAt: BigInt(Date.now()),
          requests5m: int64(figures.requests5m),
          errors5m: int64(figures.errors5m),
          spoolBytes: int64(figures.spoolBytes),
          backfillBacklog: int64(figures.backfillBacklog),
          appliedConfigVersion: int64(figures.appliedConfigVersion),
          ready: figures.ready,
        },
      });
    };

    const onRotation = (rotation: CredentialRotation): void => {
      // Stored even when the stream has ended meanwhile: the node then connects with the new one
      // (which acknowledges it) instead of an old one whose window may start at any moment.
      rotations = rotations.then(async () => {
        const next = parseRotation(rotation);
        if (next === undefined) {
          // Not acknowledged: the control plane keeps the current credential valid and may retry.
          logger.warn({ credentialId: peerText(rotation.credentialId) }, 'ignored an unusable credential rotation');
          return;
        }
        // Neither outcome below ends the session: ending it would only reconnect with the same
        // credential and be rotated again at once (a full disk made the link flap, docs/spool.md
        // "Disk full"). Unacknowledged, the control plane keeps the credential in use valid and
        // offers the rotation again later on this session.
        let outcome: void | RotationNotStored;
        try {
          outcome = await opts.storeRotatedCredential(next, held);
        } catch (err) {
          const fields = { credentialId: next.id, err: { message: (err as Error).message, code: (err as NodeJS.ErrnoException).code } };
          const message = 'could not store the rotated credential: not acknowledged; the session goes on with the credential in use, and the control plane offers the rotation again later';
          // Once per rotation: the control plane offers the same one again every few minutes.
          if (storeFailureWarnedFor === next.id) logger.debug(fields, message);
          else logger.warn(fields, message);
          storeFailureWarnedFor = next.id;
          return;
        }
        if (outcome !== undefined && !outcome.stored) {
          logger.warn({ credentialId: next.id, reason: outcome.reason }, 'did not store the rotated credential: credential.json no longer holds what this session started from; not acknowledged');
          return;
        }
        held = next;
        // Only now, with the credential durable, may the control plane let the previous one lapse.
        // After the stream ended there is no one to tell (send drops it); the next connect does.
        send({ credentialRotationAck: { credentialId: next.id } });
        logger.info({ credentialId: next.id, expiresAt: next.expiresAt }, 'credential rotated');
      });
    };

    const onConfigPush = (push: ConfigPush): void => {
      configPushes = configPushes.then(async () => {
        let result: ConfigPushResult;
        try {
          result = opts.onConfigPush !== undefined
            ? await opts.onConfigPush(push)
            : { ok: false, code: 'CONFIG_APPLY_FAILED', message: 'this node does not take config pushes', retryable: false };
        } catch (err) {
          logger.error({ err: { message: (err as Error).message }, version: String(push.version) }, 'config push failed');
          result = { ok: false, code: 'CONFIG_APPLY_FAILED', message: peerText(`the node failed to apply the bundle: ${(err as Error).message}`), retryable: true };
        }
        // The result is durable whether or not the session is still there to hear it.
        send({ configAck: { version: push.version, ok: result.ok, error: result.ok ? undefined : { code: result.code, message: peerText(result.message), retryable: result.retryable } } });
      });
    };

    call.on('data', (message: ControlMessage) => {
      if (message.helloAck !== undefined) {
        const ack = message.helloAck;
        if (!ack.accepted) {
          refusal ??= { code: 'HELLO_REJECTED', message: 'the control plane did not accept the hello' };
          call.cancel();
          return;
        }
        if (!isCompatibleProtocol(ack.serverProtocolVersion)) {
          endLocally('refused', 'PROTOCOL_INCOMPATIBLE', describeProtocolMismatch(protocolVersion, ack.serverProtocolVersion));
          return;
        }
        if (established) return;
        clearTimeout(helloTimer);
        established = true;
        establishedAt = Date.now();
        sessionId = peerText(ack.sessionId);
        const info: SessionInfo = {
          sessionId,
          serverProtocolVersion: ack.serverProtocolVersion,
          serverTimeMs: Number(ack.serverTime),
          helloRoundTripMs: performance.now() - helloSentAt,
          heartbeatIntervalMs: clampInterval(ack.heartbeatIntervalMs),
          credentialId: opts.credential.id,
        };
        // The caller logs "control session established" once it has recorded the new state.
        opts.onEstablished?.(info);
        // The first heartbeat at once: the console shows the node live without waiting an interval.
        sendHeartbeat();
        heartbeatTimer = setInterval(sendHeartbeat, info.heartbeatIntervalMs);
        for (const channel of channels) channel.onEstablished(send, { sessionId });
      } else if (message.refusal !== undefined) {
        const error = message.refusal.error;
        refusal ??= { code: peerText(error?.code ?? '') || 'REFUSED', message: peerText(error?.message ?? '') };
      } else if (message.credentialRotation !== undefined) {
        onRotation(message.credentialRotation);
      } else if (message.configPush !== undefined) {
        if (established) onConfigPush(message.configPush);
        else logger.warn({ version: String(message.configPush.version) }, 'ignored a config push that came before the hello was answered');
      } else if (!established || !channels.some((channel) => channel.onMessage(message))) {
        logger.debug({ payload: Object.keys(message).filter((key) => message[key as keyof ControlMessage] !== undefined) }, 'ignored a control message this node does not handle');
      }
    });

    // Every failure also arrives as 'status'; the listener only keeps it from being unhandled.
    call.on('error', () => undefined);
    call.on('status', (status: grpc.StatusObject) => {
      if (finished) return;
      finished = true;
      clearTimeout(helloTimer);
      clearInterval(heartbeatTimer);
      if (established) for (const channel of channels) channel.onEnded();
      opts.signal?.removeEventListener('abort', onAbort);
      client.close();
      const establishedMs = established ? Date.now() - establishedAt : 0;
      // Resolves once a rotation received before the end is stored: the caller reconnects with
      // whatever credential.json holds then.
      const settle = (end: SessionEnd): void => {
        const done = (): void => resolve(end);
        void rotations.then(done, done);
      };
      const base = { established, establishedMs, ...(sessionId !== undefined ? { sessionId } : {}) };
      if (localEnd !== undefined) {
        settle({ ...base, ...localEnd });
      } else if (refusal !== undefined) {
        settle({ ...base, reason: 'refused', code: refusal.code, message: refusal.message || peerText(status.details) });
      } else {
        // The status details start with the code ("CODE: message") when the Refusal message was lost.
        const detailsCode = status.code === grpc.status.OK ? undefined : refusalCodeOfStatusDetails(status.details);
        if (detailsCode !== undefined) {
          settle({ ...base, reason: 'refused', code: detailsCode, message: peerText(status.details.slice(detailsCode.length).replace(/^[:\s]+/, '')) });
        } else if (status.code === grpc.status.OK) {
          settle({ ...base, reason: 'disconnected', code: 'SESSION_CLOSED', message: 'the control plane closed the session' });
        } else {
          const described = describeFailure(status, established);
          if (proxy !== undefined && described.code === 'GATEWAY_UNREACHABLE') {
            void describeProxiedFailure(proxy, identity.gateway, peerText(cleanDetails(status.details))).then((why) => settle({ ...base, reason: 'disconnected', ...why }));
          } else {
            settle({ ...base, reason: 'disconnected', ...described });
          }
        }
      }
    });

    const helloConfig = opts.helloConfig?.();
    call.write({
      hello: {
        nodeId: identity.nodeId,
        nodeName: identity.nodeName,
        version: opts.facts.version,
        protocolVersion,
        hostname: opts.facts.hostname,
        arch: opts.facts.arch,
        // The control plane pushes the latest at once when this is behind.
        appliedConfigVersion: int64(opts.figures().appliedConfigVersion),
        ...(helloConfig !== undefined
          ? {
              highestAppliedConfigVersion: int64(helloConfig.highestAppliedConfigVersion),
              ...(helloConfig.appliedConfigContentSha256 !== undefined ? { appliedConfigContentSha256: Buffer.from(helloConfig.appliedConfigContentSha256) } : {}),
            }
          : {}),
      },
    });
  });
}
