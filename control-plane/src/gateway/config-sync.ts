/**
 * Keeps one node's config current over its control stream. The node is pushed the latest signed
 * bundle whenever it is behind — after its hello, on every config change, and on heartbeats as a
 * safety net — with at most one push in flight: the node's ack ends it and is recorded, and whatever
 * arrived meanwhile goes out next as one push of the newest version (a bundle is the whole config,
 * so intermediate versions are skipped). A refused version is not pushed again unless the node said
 * retrying may help, and then not before `retryRefusedAfterMs`; a newer version always goes out.
 * A version whose bundle cannot be built is recorded as the node's configError (CONFIG_BUILD_FAILED),
 * once per version, so the admin API shows why the node is behind.
 *
 * Bundles carry upstream secrets: this logs versions, sizes and codes, never a bundle.
 */
import type pg from 'pg';
import type pino from 'pino';
import type { ControlMessage } from '../../../proto/src/index.js';
import { BundleBuildError } from '../config/bundle-builder.js';
import type { ConfigPublisher } from '../config/config-publisher.js';
import { SecretBoxError } from '../crypto/secret-box.js';
import type { ValidConfigAck } from './node-messages.js';
import { recordConfigApplied, recordConfigRefused, type ConfigRefusal } from './node-status.js';

export interface ConfigSyncOptions {
  publisher: ConfigPublisher;
  pool: pg.Pool;
  /** A push not acknowledged within this long is taken as lost and may be sent again. */
  ackTimeoutMs: number;
  /** A version the node refused as retryable is pushed again after this long. */
  retryAfterMs: number;
  /** A version whose bundle could not be built is tried again after this long. */
  buildRetryMs: number;
  /** Monotonic milliseconds. */
  clock(): number;
}

export const DEFAULT_CONFIG_ACK_TIMEOUT_MS = 30_000;
export const DEFAULT_CONFIG_RETRY_AFTER_MS = 30_000;
// Build failures are mostly the database being busy or away for a moment.
export const DEFAULT_CONFIG_BUILD_RETRY_MS = 5_000;

/** The code a node's configError carries when the control plane could not build its bundle. */
export const CONFIG_BUILD_FAILED = 'CONFIG_BUILD_FAILED';

function buildFailure(version: number, err: unknown): ConfigRefusal {
  // These two name what is wrong and never a secret; anything else (the database's errors) stays in the log.
  const why = err instanceof BundleBuildError || err instanceof SecretBoxError ? err.message : 'see the control plane log';
  return { version, code: CONFIG_BUILD_FAILED, message: `the control plane could not build this node's config bundle: ${why}` };
}

export class ConfigSync {
  /** The newest version the node is known to hold (its hello, then its acks). */
  private applied = 0;
  private inFlight: { version: number; sentAt: number } | undefined;
  private refused: { version: number; retryable: boolean; at: number } | undefined;
  private buildFailed: { version: number; at: number } | undefined;

  constructor(
    private readonly nodeId: string,
    private readonly opts: ConfigSyncOptions,
    private readonly log: pino.Logger,
    /** Writes to the stream; false when the session is no longer live (nothing was sent). */
    private readonly send: (message: ControlMessage) => boolean,
  ) {}

  /** What the node said it holds when it said hello. */
  startFrom(appliedVersion: number): void {
    this.applied = appliedVersion;
  }

  get appliedVersion(): number {
    return this.applied;
  }

  get pushInFlight(): number | undefined {
    return this.inFlight?.version;
  }

  /** Whether `push()` may have something to do now; cheap (no I/O), for coalescing notifications. */
  wantsPush(): boolean {
    const now = this.opts.clock();
    if (this.inFlight !== undefined && now - this.inFlight.sentAt < this.opts.ackTimeoutMs) return false;
    const latest = this.opts.publisher.knownLatest;
    return latest > this.applied && !this.held(latest, now);
  }

  /**
   * Pushes the latest bundle if the node is behind and nothing is in flight. Resolves with the
   * version pushed, or undefined. Throws when the bundle cannot be built (the caller logs it); the
   * same version is then not tried again before `buildRetryMs`.
   */
  async push(): Promise<number | undefined> {
    const now = this.opts.clock();
    if (this.inFlight !== undefined) {
      if (now - this.inFlight.sentAt < this.opts.ackTimeoutMs) return undefined;
      this.log.warn({ version: this.inFlight.version, waitedMs: now - this.inFlight.sentAt }, 'no ack for a config push; taking it as lost');
      this.inFlight = undefined;
    }
    if (this.opts.publisher.knownLatest <= this.applied || this.held(this.opts.publisher.knownLatest, now)) return undefined;
    let signed;
    try {
      signed = await this.opts.publisher.bundleFor(this.nodeId);
    } catch (err) {
      const version = this.opts.publisher.knownLatest;
      const firstTry = this.buildFailed?.version !== version;
      this.buildFailed = { version, at: this.opts.clock() };
      // Shown to operators as the node's configError (until it applies a version): why it is behind.
      if (firstTry) await this.record(() => recordConfigRefused(this.opts.pool, this.nodeId, buildFailure(version, err)));
      throw err;
    }
    this.buildFailed = undefined;
    // Gone: the node-deleted event ends this session; nothing to push meanwhile.
    if (signed === undefined || signed.version <= this.applied || this.held(signed.version, this.opts.clock())) return undefined;
    const sent = this.send({
      configPush: { version: BigInt(signed.version), bundle: signed.bytes, signature: signed.signature, keyId: signed.keyId },
    });
    if (!sent) return undefined;
    this.inFlight = { version: signed.version, sentAt: this.opts.clock() };
    this.log.debug({ version: signed.version, bytes: signed.bytes.byteLength, keyId: signed.keyId }, 'config pushed');
    return signed.version;
  }

  /**
   * Records the node's ack of the push in flight (an ack of anything else is ignored: a node cannot
   * claim a version it was not sent). Resolves true when a newer version is waiting to go out.
   */
  async onAck(ack: ValidConfigAck): Promise<boolean> {
    if (this.inFlight === undefined || ack.version !== this.inFlight.version) {
      this.log.warn({ version: ack.version, inFlight: this.inFlight?.version ?? null }, 'ignoring a config ack for a version not in flight');
      return false;
    }
    this.inFlight = undefined;
    if (ack.ok) {
      this.applied = Math.max(this.applied, ack.version);
      this.refused = undefined;
      this.log.info({ version: ack.version }, 'node applied config');
      await this.record(() => recordConfigApplied(this.opts.pool, this.nodeId, ack.version));
    } else {
      const error = ack.error ?? { code: 'UNSPECIFIED', message: 'the node gave no reason', retryable: false };
      this.refused = { version: ack.version, retryable: error.retryable, at: this.opts.clock() };
      this.log.warn({ version: ack.version, code: error.code, message: error.message, retryable: error.retryable }, 'node refused config; it keeps its last good config');
      await this.record(() => recordConfigRefused(this.opts.pool, this.nodeId, { version: ack.version, code: error.code, message: error.message }));
    }
    return this.wantsPush();
  }

  /** True when `version` must not be pushed now: refused for good, refused lately, or failed to build lately. */
  private held(version: number, now: number): boolean {
    const refused = this.refused;
    if (refused !== undefined && version <= refused.version && (!refused.retryable || now - refused.at < this.opts.retryAfterMs)) return true;
    const failed = this.buildFailed;
    return failed !== undefined && version <= failed.version && now - failed.at < this.opts.buildRetryMs;
  }

  private async record(write: () => Promise<boolean>): Promise<void> {
    try {
      await write();
    } catch (err) {
      // The node's state is right either way; the figure catches up with its next ack.
      this.log.warn({ err }, 'could not record the config ack');
    }
  }
}
