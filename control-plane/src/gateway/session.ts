/**
 * One node's control stream, from the call to its end: authenticate the call metadata, wait (with
 * a deadline) for Hello, check the protocol, answer HelloAck, then keep the node's config current
 * (config-sync.ts), record heartbeats and rotate the credential until either side ends it, or until
 * the credential the session stands on is no longer accepted. Every refusal sends a Refusal message and then ends the
 * call with the matching gRPC status. Messages are handled one at a time, in arrival order; a node
 * that sends faster than the database keeps up is slowed down by HTTP/2 flow control.
 */
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import type pg from 'pg';
import type pino from 'pino';
import {
  NODE_CREDENTIAL_METADATA_KEY,
  NODE_ID_METADATA_KEY,
  MAX_PROTOCOL_VERSION_FACT,
  PROTOCOL_VERSION,
  configContentSha256,
  isCompatibleProtocol,
  type ControlMessage,
  type CredentialRotationAck,
  type NodeMessage,
  type RefusalCode,
} from '../../../proto/src/index.js';
import type { ConfigPublisher } from '../config/config-publisher.js';
import { MAX_VERSION_CATCH_UP, continueVersionsPast } from '../config/config-changes.js';
import { isDatabaseUnavailable } from '../db/connection-errors.js';
import {
  acknowledgeCredential, credentialLapse, rotateCredential, verifyCredential, type CredentialTimings, type CredentialValidity,
} from '../nodes/credentials.js';
import { NodeDeletedError } from '../nodes/node-repository.js';
import { ConfigSync } from './config-sync.js';
import { NodeMessageInvalid } from './node-stream-handler.js';
import type { NodeStreamHandler, StreamNode } from './node-stream-handler.js';
import { parseNodeMessage, type ValidConfigAck, type ValidHeartbeat, type ValidHello } from './node-messages.js';
import { recordConfigServed, recordHeartbeat, recordHello } from './node-status.js';
import { refusalMessage, refusalStatus } from './refusal.js';
import { refusalForEvent, type RegisteredSession, type SessionRegistry } from './session-registry.js';

export type ControlCall = grpc.ServerDuplexStream<NodeMessage, ControlMessage>;

/** What every session of one gateway shares. */
export interface SessionContext {
  pool: pg.Pool;
  logger: pino.Logger;
  registry: SessionRegistry;
  /** Record batches, leases: handed the messages they claim (node-stream-handler.ts). */
  handlers?: readonly NodeStreamHandler[];
  credentialTimings: CredentialTimings;
  heartbeatIntervalMs: number;
  helloDeadlineMs: number;
  /** How often a live session checks whether its credential is due for rotation. */
  rotationCheckMs: number;
  /** The clock credential decisions use (tests move it forward). */
  now(): Date;
  /** Fault injection: true when this rotation reply must be dropped (uses up one). */
  dropRotationReply(): boolean;
  /** Called once when the session has ended, however it ended. */
  onEnded(session: NodeSession): void;
  /** Config pushes: the gateway's publisher and how long to wait on a node. */
  config: { publisher: ConfigPublisher; ackTimeoutMs: number; retryAfterMs: number; buildRetryMs: number };
}

type SessionState = 'authenticating' | 'awaiting-hello' | 'live' | 'ended';

interface HeldCredential {
  credentialId: string;
  /** The opaque credential; kept to re-check the session, never logged. */
  secret: string;
  issuedAt: Date;
  isNewest: boolean;
  /** Known at connect and re-read on every acknowledgement: compared with the clock, no query per message. */
  validity: CredentialValidity;
}

// Generous bounds for the metadata: real values are a uuid and ~80 characters.
const MAX_NODE_ID_CHARS = 64;
const MAX_CREDENTIAL_CHARS = 512;
// Messages waiting to be handled before the stream stops reading (and the node's sends block).
const PAUSE_AT_QUEUED = 32;
const RESUME_AT_QUEUED = 8;
// Timers may fire a little early against the monotonic clock the config sync measures with.
const RETRY_MARGIN_MS = 50;
/**
 * How long a rotation the node has not acknowledged waits before this session offers it again (the
 * node could not store it: a full disk, a lock another process held). Sooner would only repeat a
 * failing write; never would keep a node whose disk frees up on its old credential until it
 * reconnects. The same credential is offered again, so no credential row is added.
 */
export const ROTATION_REOFFER_AFTER_MS = 5 * 60_000;

function metadataText(metadata: grpc.Metadata, key: string): string | undefined {
  const value = metadata.get(key)[0];
  return typeof value === 'string' && value !== '' ? value : undefined;
}

/** Says which side to upgrade, in the node operator's words. */
export function protocolMismatchMessage(nodeName: string, nodeProtocol: number): string {
  const head = `node ${nodeName} speaks control protocol v${nodeProtocol}, this control plane speaks v${PROTOCOL_VERSION}`;
  if (nodeProtocol < 1) return `${head}: the node sent no protocol version; upgrade the node`;
  if (nodeProtocol > PROTOCOL_VERSION) {
    return `${head}: the node is newer; upgrade the control plane, or install the node release the control plane pins`;
  }
  return `${head}: the node is older; upgrade the node (zenova gateway-node upgrade-command ${nodeName})`;
}

export class NodeSession implements RegisteredSession {
  readonly sessionId = randomUUID();
  private state: SessionState = 'authenticating';
  private log: pino.Logger;
  private auth: { nodeId: string; nodeName: string } | undefined;
  private credential: HeldCredential | undefined;
  private pendingRotation: HeldCredential | undefined;
  /** When pendingRotation was last sent to the node (the credential clock, ms). */
  private pendingRotationSentAt = 0;
  private eventCursor = 0;
  private helloTimer: NodeJS.Timeout | undefined;
  private rotationTimer: NodeJS.Timeout | undefined;
  private work: Promise<void> = Promise.resolve();
  private queued = 0;
  private paused = false;
  private configSync: ConfigSync | undefined;
  private configCheckQueued = false;
  private configRetryTimer: NodeJS.Timeout | undefined;
  /**
   * The newest config version this session knows the node holds and this control plane has: its
   * hello's once checked, then the acks of what it was pushed. Heartbeats record it (not their own
   * figure, which only the node vouches for) when recording the hello or an ack failed.
   */
  private confirmedConfigVersion = 0;

  constructor(
    private readonly call: ControlCall,
    private readonly ctx: SessionContext,
  ) {
    this.log = ctx.logger.child({ sessionId: this.sessionId, peer: call.getPeer() });
  }

  /** The authenticated node id; empty until the credential is checked. */
  get nodeId(): string {
    return this.auth?.nodeId ?? '';
  }

  get isLive(): boolean {
    return this.state === 'live';
  }

  /** A getter, not a field test, so checks after an await are not narrowed away by the compiler. */
  private get over(): boolean {
    return this.state === 'ended';
  }

  /** Settles when the session has no work in flight (for a clean shutdown). */
  idle(): Promise<void> {
    return this.work;
  }

  start(): void {
    this.call.on('data', (message: NodeMessage) => this.enqueue(() => this.handle(message)));
    // The node half-closed: it is done, so is the session (status OK).
    this.call.on('end', () => {
      if (this.state === 'ended') return;
      this.log.info('the node closed its control stream');
      this.finish();
      this.call.end();
    });
    this.call.on('cancelled', () => {
      if (this.state === 'ended') return;
      this.log.info('the node went away');
      this.finish();
    });
    // Our own ending emits 'error' (that is how grpc-js sets the status); anything else is the call failing.
    this.call.on('error', () => this.finish());
    this.call.on('close', () => this.finish());
    this.enqueue(() => this.authenticate());
  }

  /** Sends a Refusal and ends the call with the code's gRPC status; idempotent. */
  end(code: RefusalCode, message: string): void {
    if (this.state === 'ended') return;
    this.finish();
    this.log.info({ code }, `control session refused: ${message}`);
    if (this.call.cancelled || this.call.writableEnded) return;
    this.call.write(refusalMessage(code, message));
    const status = refusalStatus(code, message);
    this.call.emit('error', { code: status.code, details: status.details, metadata: new grpc.Metadata() });
  }

  /**
   * A config change was published (or may have been missed): push if the node is behind. Calls
   * coalesce — one check waits in the queue at a time, and none while a push awaits its ack.
   */
  configChanged(): void {
    if (!this.isLive || this.configCheckQueued || this.configSync?.wantsPush() !== true) return;
    this.configCheckQueued = true;
    this.enqueue(async () => {
      this.configCheckQueued = false;
      await this.pushConfig();
    });
  }

  /**
   * Re-checks the credential after node events may have been missed (the listener reconnected):
   * ends the session with whatever a reconnect with its credential would be refused. Any session
   * past authentication, live or not yet: one that authenticated before a revocation whose event
   * was lost would otherwise go live on it (its hello finds no missed event to refuse). Queued, so
   * a session still authenticating is checked once that is done.
   */
  recheck(): void {
    this.enqueue(async () => {
      const held = this.credential;
      if (this.over || held === undefined) return;
      let check;
      try {
        check = await verifyCredential(this.ctx.pool, this.nodeId, held.secret, this.ctx.now());
      } catch (err) {
        // A healthy session is not ended for a failed re-check; the next event or reconnect decides.
        this.log.warn({ err }, 'could not re-check the session credential');
        return;
      }
      if (!check.ok) {
        this.end(check.code, check.message);
        return;
      }
      if (this.credential === held) this.credential = { ...held, validity: check.validity };
    });
  }

  // ---- the stream ----

  private enqueue(task: () => Promise<void>): void {
    this.queued += 1;
    if (this.queued >= PAUSE_AT_QUEUED && !this.paused) {
      this.paused = true;
      this.call.pause();
    }
    this.work = this.work
      .then(async () => {
        if (!this.over) await task();
      })
      .catch((err: unknown) => this.failed(err))
      .finally(() => {
        this.queued -= 1;
        if (this.paused && this.queued <= RESUME_AT_QUEUED) {
          this.paused = false;
          this.call.resume();
        }
      });
  }

  private failed(err: unknown): void {
    if (isDatabaseUnavailable(err)) {
      this.log.warn({ err }, 'control session ended: the database is unavailable');
    } else {
      this.log.error({ err }, 'control session failed');
    }
    this.end('SERVER_UNAVAILABLE', 'the control plane could not serve this session right now; reconnect later');
  }

  private finish(): void {
    if (this.state === 'ended') return;
    const wasLive = this.state === 'live';
    this.state = 'ended';
    clearTimeout(this.helloTimer);
    clearInterval(this.rotationTimer);
    clearTimeout(this.configRetryTimer);
    this.ctx.registry.unregister(this);
    if (wasLive) {
      this.log.info('control session ended');
      for (const handler of this.ctx.handlers ?? []) handler.onEnded?.(this.streamNode());
    }
    this.ctx.onEnded(this);
  }

  private async authenticate(): Promise<void> {
    const nodeId = metadataText(this.call.metadata, NODE_ID_METADATA_KEY);
    const presented = metadataText(this.call.metadata, NODE_CREDENTIAL_METADATA_KEY);
    if ((nodeId?.length ?? 0) > MAX_NODE_ID_CHARS || (presented?.length ?? 0) > MAX_CREDENTIAL_CHARS) {
      this.end('CREDENTIAL_INVALID', 'the node id or credential in the call metadata is malformed (too long)');
      return;
    }
    // Taken before the check: an event for this node from here on is caught when it goes live.
    this.eventCursor = this.ctx.registry.eventCursor();
    const check = await verifyCredential(this.ctx.pool, nodeId, presented, this.ctx.now());
    if (this.over) return; // the node went away meanwhile
    if (!check.ok) {
      this.log = this.log.child({ claimedNodeId: nodeId });
      this.end(check.code, check.message);
      return;
    }
    this.auth = { nodeId: check.nodeId, nodeName: check.nodeName };
    this.credential = {
      credentialId: check.credentialId, secret: presented ?? '', issuedAt: check.issuedAt, isNewest: check.isNewest, validity: check.validity,
    };
    // "credId": the logger censors any key naming a credential; the id is not the secret.
    this.log = this.log.child({ nodeId: check.nodeId, node: check.nodeName, credId: check.credentialId });
    // Connecting with a credential proves the node saved it: that is its acknowledgement when the
    // ack on the stream was lost, and it starts the handover window of the one it replaced.
    if (!check.acknowledged) await this.acknowledge(check.credentialId, 'presented');
    if (this.over) return;
    this.state = 'awaiting-hello';
    this.helloTimer = setTimeout(() => {
      this.end('HELLO_REQUIRED', `no Hello within ${this.ctx.helloDeadlineMs} ms of connecting; the node must send Hello first`);
    }, this.ctx.helloDeadlineMs);
    this.helloTimer.unref();
  }

  private async handle(message: NodeMessage): Promise<void> {
    const parsed = parseNodeMessage(message);
    if (parsed.kind === 'invalid') {
      this.end('MESSAGE_INVALID', `malformed message: ${parsed.reason}`);
      return;
    }
    if (parsed.kind === 'unknown') {
      this.log.debug('ignoring a message without a payload this control plane knows');
      return;
    }
    // Nothing is served on a credential a reconnect would be refused; an acknowledgement goes
    // first, since it moves the session onto the successor (checked once it is handled).
    if (parsed.kind !== 'credentialRotationAck' && this.endIfCredentialLapsed()) return;
    if (this.state === 'awaiting-hello') {
      if (parsed.kind !== 'hello') {
        const got = parsed.kind === 'unhandled' ? parsed.payload : parsed.kind;
        this.end('HELLO_REQUIRED', `the first message must be Hello, got ${got}`);
        return;
      }
      await this.onHello(parsed.hello);
      return;
    }
    switch (parsed.kind) {
      case 'hello':
        this.end('MESSAGE_INVALID', 'Hello was already received on this stream');
        return;
      case 'heartbeat':
        await this.onHeartbeat(parsed.heartbeat);
        return;
      case 'credentialRotationAck':
        await this.onRotationAck(parsed.ack);
        this.endIfCredentialLapsed();
        return;
      case 'configAck':
        await this.onConfigAck(parsed.ack);
        return;
      case 'unhandled': {
        const handler = this.ctx.handlers?.find((h) => h.payloads.includes(parsed.payload));
        if (handler === undefined) {
          this.log.debug({ payload: parsed.payload }, 'ignoring a message this control plane does not handle yet');
          return;
        }
        try {
          await handler.handle(this.streamNode(), message, this.sendToNode);
        } catch (err) {
          if (err instanceof NodeMessageInvalid) {
            this.end('MESSAGE_INVALID', `malformed ${parsed.payload}: ${err.message}`);
            return;
          }
          // The handler found the node deleted before the deletion's event (NOTIFY) ended this session.
          if (err instanceof NodeDeletedError) {
            const { code, message: text } = refusalForEvent('node-deleted');
            this.end(code, text);
            return;
          }
          throw err;
        }
        return;
      }
    }
  }

  /** Who the handlers are talking to (only once live). */
  private streamNode(): StreamNode {
    return { nodeId: this.auth!.nodeId, nodeName: this.auth!.nodeName, sessionId: this.sessionId };
  }

  /** Replies from handlers; dropped once the session is over. */
  private readonly sendToNode = (message: ControlMessage): boolean => {
    if (!this.isLive || this.call.cancelled || this.call.writableEnded) return false;
    this.call.write(message);
    return true;
  };

  private async onHello(hello: ValidHello): Promise<void> {
    clearTimeout(this.helloTimer);
    const auth = this.auth!;
    if (hello.nodeId.toLowerCase() !== auth.nodeId) {
      this.end('MESSAGE_INVALID', 'Hello.nodeId does not match the node id in the call metadata');
      return;
    }
    // Past any release and past the nodes table's integer column: refused before it is recorded, so
    // the node hears "incompatible" (and waits), not a database failure it would retry at once.
    if (hello.protocolVersion > MAX_PROTOCOL_VERSION_FACT) {
      this.end('PROTOCOL_INCOMPATIBLE', protocolMismatchMessage(auth.nodeName, hello.protocolVersion));
      return;
    }
    // Recorded even for an incompatible node: the console then shows what it runs.
    const exists = await recordHello(this.ctx.pool, auth.nodeId, {
      version: hello.version,
      protocolVersion: hello.protocolVersion,
      hostname: hello.hostname,
      arch: hello.arch,
      appliedConfigVersion: hello.appliedConfigVersion,
    });
    if (this.over) return;
    if (!exists) {
      this.end(refusalForEvent('node-deleted').code, refusalForEvent('node-deleted').message);
      return;
    }
    if (!isCompatibleProtocol(hello.protocolVersion)) {
      this.end('PROTOCOL_INCOMPATIBLE', protocolMismatchMessage(auth.nodeName, hello.protocolVersion));
      return;
    }
    if (!(await this.outlivesMissedEvents(auth.nodeId))) return;
    this.ctx.registry.register(this);
    this.state = 'live';
    this.call.write({
      helloAck: {
        accepted: true,
        serverProtocolVersion: PROTOCOL_VERSION,
        sessionId: this.sessionId,
        serverTime: BigInt(Date.now()),
        heartbeatIntervalMs: this.ctx.heartbeatIntervalMs,
      },
    });
    this.log.info({ version: hello.version, protocolVersion: hello.protocolVersion, hostname: hello.hostname, arch: hello.arch, appliedConfigVersion: hello.appliedConfigVersion }, 'node connected');
    this.rotationTimer = setInterval(() => this.enqueue(() => this.maybeRotate()), this.ctx.rotationCheckMs);
    this.rotationTimer.unref();
    this.configSync = new ConfigSync(
      auth.nodeId,
      { ...this.ctx.config, pool: this.ctx.pool, clock: () => performance.now() },
      this.log,
      (message) => {
        if (!this.isLive || this.call.cancelled || this.call.writableEnded) return false;
        this.call.write(message);
        return true;
      },
    );
    this.configSync.startFrom(hello.appliedConfigVersion);
    if (await this.continueRestoredVersions(hello)) await this.recordServedConfig(hello.appliedConfigVersion);
    await this.pushConfig({ refresh: true });
    await this.maybeRotate();
    for (const handler of this.ctx.handlers ?? []) {
      if (this.over) return;
      await handler.onLive?.(this.streamNode(), this.sendToNode);
    }
  }

  /**
   * Checks the node events that arrived since the credential was checked; false when the session
   * was ended for one. A deletion refuses. A revocation may predate the credential presented (a
   * re-enrollment's NOTIFY reaching this replica late), so the credential is checked again and
   * refused only if that fails; an event arriving during that check is looked at in turn.
   */
  private async outlivesMissedEvents(nodeId: string): Promise<boolean> {
    for (;;) {
      const missed = this.ctx.registry.eventSince(nodeId, this.eventCursor);
      if (missed === undefined) return true;
      if (missed === 'node-deleted') {
        const { code, message } = refusalForEvent(missed);
        this.end(code, message);
        return false;
      }
      this.eventCursor = this.ctx.registry.eventCursor();
      const held = this.credential!;
      const check = await verifyCredential(this.ctx.pool, nodeId, held.secret, this.ctx.now());
      if (this.over) return false;
      if (!check.ok) {
        this.end(check.code, check.message);
        return false;
      }
      this.credential = { ...held, isNewest: check.isNewest, validity: check.validity };
    }
  }

  // ---- config ----

  /**
   * A node that applied a version past this control plane's newest, or that serves the newest
   * version with other content, means a database restored from a backup: the versions move on past
   * it (config-changes.ts), so this node and every other takes the current config instead of
   * refusing it as older than what it has or taking it as synced. The node's mark counts as well as
   * the version it serves: it refuses versions below it even while it serves none. True when the
   * node's versions are this control plane's (none past its newest, nor other content at it).
   */
  private async continueRestoredVersions(hello: ValidHello): Promise<boolean> {
    const applied = Math.max(hello.appliedConfigVersion, hello.highestAppliedConfigVersion);
    try {
      const latest = await this.ctx.config.publisher.latestVersion();
      if (applied < latest) return true;
      const sameVersionDiffers = applied === latest;
      if (sameVersionDiffers && !(await this.servesOtherConfigAt(latest, hello))) return true;
      const version = await continueVersionsPast(this.ctx.pool, applied, { sameVersionDiffers });
      if (version === 'already') return false;
      if (version === 'too-far') {
        this.log.warn({ appliedConfigVersion: applied, maxCatchUp: MAX_VERSION_CATCH_UP }, 'the node reports a config version too far past this control plane\'s to continue from; versions left as they are');
        return false;
      }
      this.ctx.config.publisher.noteVersion(version);
      this.log.warn(
        { appliedConfigVersion: applied, version },
        sameVersionDiffers
          ? 'the node serves another config under this control plane\'s newest version (database restored from a backup?): config versions continue past it so every node takes the current config'
          : 'the node had applied a config version past this control plane\'s newest (database restored from a backup?): config versions continue past it so every node takes the current config',
      );
      return false;
    } catch (err) {
      // The push below still runs; the next hello tries again.
      this.log.error({ err }, 'could not move the config versions past the node\'s');
      return false;
    }
  }

  /**
   * The node serves `version`, one of this control plane's: recorded as applied, as its ack would
   * have been. That ack may have been lost (the control plane died before recording it, the stream
   * dropped between apply and ack), and nothing is pushed to a node that serves the newest version,
   * so no other ack would correct the record. 0 (nothing served, or a config of an earlier
   * enrollment as another node) records nothing.
   */
  private async recordServedConfig(version: number): Promise<void> {
    if (version <= 0) return;
    this.confirmedConfigVersion = version;
    try {
      await recordConfigServed(this.ctx.pool, this.nodeId, version);
    } catch (err) {
      this.log.warn({ err }, 'could not record the config version the node serves; its heartbeats try again');
    }
  }

  /**
   * True when the node serves `version` but not this control plane's config of that version (its
   * content hash differs). A node that sent no hash (an older release) is taken as holding ours.
   */
  private async servesOtherConfigAt(version: number, hello: ValidHello): Promise<boolean> {
    if (hello.appliedConfigVersion !== version || hello.appliedConfigContentSha256 === undefined) return false;
    const ours = await this.ctx.config.publisher.bundleFor(this.nodeId);
    // A change made meanwhile (a newer version) is pushed the ordinary way.
    if (ours === undefined || ours.version !== version) return false;
    return !configContentSha256(ours.bytes).equals(hello.appliedConfigContentSha256);
  }

  /** Pushes the latest config when the node is behind; a failure is logged and retried later, never fatal. */
  private async pushConfig(opts: { refresh?: boolean } = {}): Promise<void> {
    const sync = this.configSync;
    if (!this.isLive || sync === undefined) return;
    try {
      // On hello the notifications heard so far may not reach back far enough: ask the database.
      if (opts.refresh === true) await this.ctx.config.publisher.latestVersion();
      if (this.over) return;
      await sync.push();
    } catch (err) {
      // The message names what is wrong (a broken row, a wrong ZENOVA_SECRET_ENC_KEY), never a secret.
      this.log.error({ err }, 'could not build the config bundle for this node; retrying on the next change or later');
      // The sync holds the failed version back for buildRetryMs; try again once that has passed.
      clearTimeout(this.configRetryTimer);
      this.configRetryTimer = setTimeout(() => this.configChanged(), this.ctx.config.buildRetryMs + RETRY_MARGIN_MS);
      this.configRetryTimer.unref();
    }
  }

  private async onConfigAck(ack: ValidConfigAck): Promise<void> {
    const sync = this.configSync;
    if (sync === undefined) return;
    // The sync takes an ack of the push in flight only: a node cannot confirm a version it was not sent.
    const confirms = ack.ok && sync.pushInFlight === ack.version;
    const newerWaiting = await sync.onAck(ack);
    if (confirms) this.confirmedConfigVersion = Math.max(this.confirmedConfigVersion, ack.version);
    if (newerWaiting) await this.pushConfig();
  }

  private async onHeartbeat(heartbeat: ValidHeartbeat): Promise<void> {
    let outcome;
    try {
      outcome = await recordHeartbeat(this.ctx.pool, this.nodeId, {
        requests5m: heartbeat.requests5m,
        errors5m: heartbeat.errors5m,
        spoolBytes: heartbeat.spoolBytes,
        backfillBacklog: heartbeat.backfillBacklog,
        appliedConfigVersion: heartbeat.appliedConfigVersion,
        // sentAt is the node's wall clock; against ours (the clock HelloAck.server_time gives it) it
        // shows how far the node's host clock is off. Transit time (ms) is within the noise.
        ...(heartbeat.sentAt > 0 ? { clockSkewMs: heartbeat.sentAt - Date.now() } : {}),
      }, Math.min(heartbeat.appliedConfigVersion, this.confirmedConfigVersion));
    } catch (err) {
      // A lost heartbeat is harmless (the next one follows); the stream stays up.
      this.log.warn({ err }, 'could not record a heartbeat');
      return;
    }
    if (outcome === undefined) {
      const { code, message } = refusalForEvent('node-deleted');
      this.end(code, message);
      return;
    }
    if (outcome.previousStage !== outcome.stage) this.log.info({ stage: outcome.stage }, 'node onboarding advanced');
    // The safety net for a lost ack or a missed notification: heartbeats come every few seconds.
    if (this.configSync?.wantsPush() === true) await this.pushConfig();
  }

  // ---- credential rotation ----

  /**
   * Ends the session once its credential has expired or its handover window has ended, with the
   * refusal a reconnect with that credential gets (an unacknowledged rotation extends nothing).
   * Runs on every message and every rotation check; true when it ended the session.
   */
  private endIfCredentialLapsed(): boolean {
    const held = this.credential;
    if (held === undefined || this.over) return false;
    const lapse = credentialLapse(held.validity, this.ctx.now());
    if (lapse === undefined) return false;
    this.end(lapse.code, lapse.message);
    return true;
  }

  private async maybeRotate(): Promise<void> {
    const held = this.credential;
    if (!this.isLive || held === undefined || this.endIfCredentialLapsed()) return;
    const now = this.ctx.now();
    const timings = this.ctx.credentialTimings;
    if (this.pendingRotation !== undefined) {
      // One rotation per session at a time: not a new one per check while the node cannot store it.
      if (now.getTime() - this.pendingRotationSentAt < ROTATION_REOFFER_AFTER_MS) return;
      if (await this.reofferPendingRotation(held, now)) return;
    }
    // At half its own life at the latest: a credential issued by an earlier run with a shorter
    // validity than this run's rotate-after would otherwise expire before it is rotated.
    const lifeMs = held.validity.expiresAt.getTime() - held.issuedAt.getTime();
    const rotateAtAgeMs = Math.min(timings.rotateAfterMs, lifeMs / 2);
    if (held.isNewest && now.getTime() - held.issuedAt.getTime() < rotateAtAgeMs) return;
    let rotated;
    try {
      rotated = await rotateCredential(this.ctx.pool, this.nodeId, held.credentialId, timings, now);
    } catch (err) {
      // The current credential keeps working; the next check tries again.
      this.log.warn({ err }, 'credential rotation failed; retrying on the next check');
      return;
    }
    if (!this.isLive) return; // ended meanwhile: like a lost reply, the presented credential keeps working
    if (this.ctx.dropRotationReply()) {
      this.log.warn({ newCredId: rotated.credentialId }, 'fault injection: dropping the rotation reply and closing the stream');
      this.finish();
      this.call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'connection lost (fault injection: rotation reply dropped)', metadata: new grpc.Metadata() });
      return;
    }
    this.pendingRotation = {
      credentialId: rotated.credentialId, secret: rotated.credential, issuedAt: now, isNewest: true,
      validity: { expiresAt: rotated.expiresAt, validUntil: null },
    };
    this.pendingRotationSentAt = now.getTime();
    this.call.write({
      credentialRotation: {
        credentialId: rotated.credentialId,
        credential: rotated.credential,
        expiresAt: BigInt(rotated.expiresAt.getTime()),
        previousValidUntil: BigInt(rotated.previousValidUntil.getTime()),
      },
    });
    this.log.info(
      { newCredId: rotated.credentialId, previousValidUntil: rotated.previousValidUntil.toISOString() },
      'credential rotated; waiting for the node to store it',
    );
  }

  /**
   * Sends the unacknowledged rotation again while its credential is still accepted; true when it
   * did (or will try again later). False when that credential is no longer accepted (revoked by
   * another replica's rotation, lapsed): the caller then rotates afresh.
   */
  private async reofferPendingRotation(held: HeldCredential, now: Date): Promise<boolean> {
    const pending = this.pendingRotation;
    if (pending === undefined) return false;
    let check;
    try {
      check = await verifyCredential(this.ctx.pool, this.nodeId, pending.secret, now);
    } catch (err) {
      this.log.warn({ err }, 'could not check the unacknowledged credential rotation; trying again later');
      this.pendingRotationSentAt = now.getTime();
      return true;
    }
    if (!this.isLive || this.pendingRotation !== pending) return true;
    if (!check.ok) {
      this.pendingRotation = undefined;
      this.log.info({ newCredId: pending.credentialId, code: check.code }, 'the unacknowledged credential rotation is no longer valid; rotating afresh');
      return false;
    }
    const previousValidUntil = new Date(Math.min(
      held.validity.validUntil?.getTime() ?? Infinity, now.getTime() + this.ctx.credentialTimings.handoverMs, held.validity.expiresAt.getTime(),
    ));
    this.pendingRotationSentAt = now.getTime();
    this.call.write({
      credentialRotation: {
        credentialId: pending.credentialId,
        credential: pending.secret,
        expiresAt: BigInt(pending.validity.expiresAt.getTime()),
        previousValidUntil: BigInt(previousValidUntil.getTime()),
      },
    });
    this.log.info({ newCredId: pending.credentialId }, 'the node has not acknowledged its new credential; offering it again');
    return true;
  }

  private async onRotationAck(ack: CredentialRotationAck): Promise<void> {
    const pending = this.pendingRotation;
    if (pending === undefined || ack.credentialId.toLowerCase() !== pending.credentialId) {
      this.log.warn({ ackedCredId: ack.credentialId }, 'ignoring an acknowledgement of a credential this session did not hand out');
      return;
    }
    this.pendingRotation = undefined;
    // From here the node uses the new credential, whether or not the acknowledgement is recorded.
    this.credential = pending;
    await this.acknowledge(pending.credentialId, 'acked');
  }

  /**
   * Records that the node holds the credential and re-reads its validity into the session (the
   * acknowledgement is when it could have changed); a failure is logged, never fatal (the next
   * connect acknowledges it).
   */
  private async acknowledge(credentialId: string, how: 'acked' | 'presented'): Promise<void> {
    let validity;
    try {
      validity = await acknowledgeCredential(this.ctx.pool, this.nodeId, credentialId, this.ctx.credentialTimings, this.ctx.now());
    } catch (err) {
      this.log.warn({ err }, 'could not record the credential acknowledgement');
      return;
    }
    const held = this.credential;
    if (validity !== undefined && held?.credentialId === credentialId) this.credential = { ...held, validity };
    if (how === 'acked') this.log.info({ newCredId: credentialId }, 'the node stored its new credential');
  }
}
