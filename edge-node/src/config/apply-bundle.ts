/**
 * Applying a pushed config bundle: verify (signature with the pinned key, canonical form, schema),
 * check it is for this node, apply the version rule (older: refused; equal with the same content:
 * acknowledged again; newer, or equal with other content: applied), build the runtime config, write
 * the cache (durably) and only then swap it in. One version can stand for two configs after the
 * control plane's database was restored from a backup, so an equal version is compared by content.
 * Pushes are applied one at a time in arrival order. Any refusal leaves the node on its last good
 * config and is reported with a code for the ack and a log line.
 *
 * The version rule's floor is also the highest version the node ever applied (applied-version.ts,
 * raised after the cache is written and before the swap), so a node that started without a config
 * (its cache rolled back) never takes an older one either. The trust (node id, signing key) can be
 * replaced while serving (a re-enrollment): the served config's version then no longer counts,
 * neither for the version rule nor in what hello and heartbeats report (`servedVersion`), so the
 * new control plane pushes its config whatever its version numbers are.
 * A replica that does not hold the control link takes the bundles the holder wrote to the cache
 * through `followCache`, verified the same way.
 */
import { configContentSha256 } from '../../../proto/src/index.js';
import type { Logger } from '../logger.js';
import path from 'node:path';
import { underOpenLockAsync } from '../state/open-lock.js';
import { CONFIG_APPLY_LOCK_FILE } from './applied-version.js';
import type { AppliedVersionMark } from './applied-version.js';
import { checkBundle } from './bundle-cache.js';
import type { BundleCache, BundleRefusalCode, BundleTrust, CachedBundle } from './bundle-cache.js';
import type { ConfigHolder } from './config-holder.js';
import { fromBundle } from './runtime-config.js';
import type { RuntimeConfig } from './runtime-config.js';

/** The codes a ConfigAck can carry (contract: the BundleCheck codes plus these). */
export type ConfigRefusalCode = BundleRefusalCode | 'CONFIG_VERSION_OLDER' | 'CONFIG_APPLY_FAILED' | 'CONFIG_CACHE_WRITE_FAILED';

export interface ConfigPushInput {
  /** ConfigPush.version. */
  version: number | bigint;
  /** The signed canonical JSON bytes. */
  bundle: Uint8Array;
  signature: Uint8Array;
}

export type ApplyOutcome =
  | {
      ok: true;
      version: number;
      /** False when this version was already applied (an idempotent re-push). */
      changed: boolean;
    }
  | { ok: false; version: number; code: ConfigRefusalCode; message: string; retryable: boolean };

/** How many unservable aliases one log line names (the rest are counted). */
const MAX_UNSERVABLE_LOGGED = 20;

/**
 * A warning for aliases the config names but this node cannot serve (their callers get
 * ZN_ERR_MODEL_NOT_FOUND): the control plane refuses such routes, but an older database may still
 * hold one, and the config is applied and acknowledged all the same, so the log is where it shows.
 */
function warnUnservableRoutes(logger: Logger, version: number, config: RuntimeConfig): void {
  if (config.unservableRoutes.size === 0) return;
  const routes = [...config.unservableRoutes].slice(0, MAX_UNSERVABLE_LOGGED).map(([alias, reason]) => ({ alias, reason }));
  logger.warn(
    { version, unservableRoutes: routes, count: config.unservableRoutes.size },
    'config applied with model routes this node cannot serve; calls to them get ZN_ERR_MODEL_NOT_FOUND',
  );
}

export interface ConfigApplier {
  apply(push: ConfigPushInput): Promise<ApplyOutcome>;
  /** The trust bundles are verified with now. */
  trust(): BundleTrust;
  /**
   * Verifies bundles with `trust` from now on (a re-enrollment changed the node id or the
   * control plane's signing key); true when it differs from the one in use.
   */
  setTrust(trust: BundleTrust): boolean;
  /**
   * Serves the cache's current.json when it verifies and is newer than the served config (another
   * replica of the node applied it); undefined when there is nothing newer to take.
   */
  followCache(): Promise<ApplyOutcome | undefined>;
  /**
   * The served version as the control plane must count it (hello and heartbeats carry it): 0 when
   * nothing is served, or when the served config verified under another trust than the current one
   * (a re-enrollment while serving) — that config is the previous installation's, not this one's.
   */
  servedVersion(): number;
  /** SHA-256 of the served bundle's content (configContentSha256); undefined when `servedVersion()` is 0. */
  servedContentSha256(): Buffer | undefined;
  /**
   * The highest version applied under the current trust: the mark, or the served version when
   * higher. Pushes below it are refused, so the control plane must count past it (hello carries it).
   */
  highestAppliedVersion(): number;
  /** True while the served config verified under another trust than the current one (a re-enrollment while serving). */
  servesPreviousTrust(): boolean;
}

export function sameTrust(a: BundleTrust, b: BundleTrust): boolean {
  return a.nodeId === b.nodeId && a.publicKeyPem.trim() === b.publicKeyPem.trim();
}

export interface ConfigApplierOptions {
  trust: BundleTrust;
  cache: BundleCache;
  holder: ConfigHolder;
  logger: Logger;
  /** The cache entry of the bundle served now (from the cache at start-up); it becomes previous. */
  serving?: CachedBundle;
  /** current.json's stamp when `serving` was read from it at start-up (followCache need not read it again). */
  servingStamp?: string;
  /** The highest version ever applied (absent: only the served version counts). */
  mark?: AppliedVersionMark;
  /** Clock for "applied at". */
  now?: () => Date;
}

export function createConfigApplier(opts: ConfigApplierOptions): ConfigApplier {
  const { cache, holder, logger, mark } = opts;
  const applyLock = path.join(path.dirname(cache.dir), CONFIG_APPLY_LOCK_FILE);
  const now = opts.now ?? (() => new Date());
  let trust = opts.trust;
  let serving = opts.serving;
  /** The trust the served config verified with (undefined: nothing served yet). */
  let servingTrust: BundleTrust | undefined = holder.current().ready ? opts.trust : undefined;
  const stampUnder = (stamp: string | undefined, under: BundleTrust): string | undefined => (stamp === undefined ? undefined : `${stamp}|${under.nodeId}|${under.publicKeyPem}`);
  /** current.json's stamp (and the trust) at followCache's last read: see followNow. */
  let followedStamp = stampUnder(opts.servingStamp, opts.trust);
  let queue: Promise<unknown> = Promise.resolve();

  const refuse = (version: number, code: ConfigRefusalCode, message: string, retryable = false): ApplyOutcome => {
    logger.warn({ version, code, reason: message }, 'config refused');
    return { ok: false, version, code, message, retryable };
  };

  const servesPreviousTrust = (): boolean => servingTrust !== undefined && !sameTrust(servingTrust, trust);
  /** The served version when it is comparable (same trust), else 0. */
  const servedVersion = (): number => (servingTrust !== undefined && !servesPreviousTrust() ? holder.appliedVersion() : 0);
  /** The served entry's content hash, computed once per entry. */
  let servedContent: { entry: CachedBundle; sha256: Buffer } | undefined;
  const servedContentSha256 = (): Buffer | undefined => {
    if (servedVersion() === 0 || serving === undefined) return undefined;
    if (servedContent?.entry !== serving) servedContent = { entry: serving, sha256: configContentSha256(Buffer.from(serving.bundle, 'utf8')) };
    return servedContent.sha256;
  };
  /** True when `bytes` are the served config: its version, served as applied, with the same content. */
  const servesSame = (version: number, bytes: () => Uint8Array, text?: string): boolean => {
    const snapshot = holder.current();
    if (version !== servedVersion() || !snapshot.ready || snapshot.olderThanApplied !== undefined) return false;
    // The same bundle text (a replica's cache poll finds the one it serves, every 2 s): no hashing.
    if (text !== undefined && serving !== undefined && text === serving.bundle) return true;
    return servedContentSha256()?.equals(configContentSha256(bytes())) === true;
  };

  /** Older than this is refused: the served version, and the highest ever applied. */
  const floor = async (): Promise<{ version: number; fromMark: boolean }> => {
    await mark?.refresh();
    const served = servedVersion();
    const highest = mark?.highest(trust) ?? 0;
    return highest > served ? { version: highest, fromMark: true } : { version: served, fromMark: false };
  };

  const refuseOlder = (version: number, lowest: { version: number; fromMark: boolean }): ApplyOutcome =>
    refuse(
      version,
      'CONFIG_VERSION_OLDER',
      lowest.fromMark
        ? `version ${version} is older than version ${lowest.version}, the highest this node applied (${mark?.file() ?? 'its applied-version mark'})`
        : `version ${version} is older than the applied version ${lowest.version}`,
    );

  const applyNow = async (push: ConfigPushInput): Promise<ApplyOutcome> => {
    const version = Number(push.version);
    const check = checkBundle(push.bundle, push.signature, trust);
    if (!check.ok) return refuse(version, check.code, check.message);
    const { bundle } = check;
    if (bundle.version !== version) {
      return refuse(version, 'CONFIG_SCHEMA', `the push says version ${version} but its signed bundle is version ${bundle.version}`);
    }
    const lowest = await floor();
    if (version < lowest.version) return refuseOlder(version, lowest);
    if (servesSame(version, () => push.bundle)) {
      logger.debug({ version }, 'config already applied');
      return { ok: true, version, changed: false };
    }
    let config: RuntimeConfig;
    try {
      config = fromBundle(bundle);
    } catch (err) {
      return refuse(version, 'CONFIG_APPLY_FAILED', (err as Error).message);
    }
    const appliedAt = now();
    const entry: CachedBundle = {
      version,
      bundle: Buffer.from(push.bundle).toString('utf8'),
      signature: Buffer.from(push.signature).toString('base64'),
      appliedAt: appliedAt.toISOString(),
    };
    try {
      // Under the lock replicas share, the floor again: two replicas may both hold the control link
      // for a moment (control-link-leader.ts), and a stale one must not write an older bundle over
      // the newer one the other applied meanwhile (the next start would refuse the cache).
      const newer = await underOpenLockAsync(applyLock, async () => {
        const now = await floor();
        if (version < now.version) return now;
        await cache.store(entry, serving);
        // Before the swap: a version served is always one the mark covers.
        await mark?.record(version, trust, appliedAt);
        return undefined;
      });
      if (newer !== undefined) return refuseOlder(version, newer);
    } catch (err) {
      // Not swapped: a config that would be lost on restart is not applied; the push may be retried.
      const code = (err as NodeJS.ErrnoException).code;
      return refuse(version, 'CONFIG_CACHE_WRITE_FAILED', `the bundle could not be written to ${cache.dir} (${code ?? (err as Error).message})`, true);
    }
    holder.swap(config, appliedAt);
    serving = entry;
    servingTrust = trust;
    const unservable = [...config.unservableRoutes.keys()];
    logger.info({ version, ...(unservable.length > 0 ? { unservableRoutes: unservable.slice(0, MAX_UNSERVABLE_LOGGED) } : {}) }, 'config applied');
    warnUnservableRoutes(logger, version, config);
    return { ok: true, version, changed: true };
  };

  const followNow = async (): Promise<ApplyOutcome | undefined> => {
    // Every link-lock tick (2 s) on each replica that does not hold the link: a file unchanged since
    // the last look, under the same trust, is not read, verified and rebuilt again (a bundle of
    // 8 MiB took half a second of the event loop each time).
    const seen = stampUnder(await cache.stamp('current'), trust);
    if (seen !== undefined && seen === followedStamp) return undefined;
    const read = await cache.read('current', trust, fromBundle);
    // Missing or damaged: the holder's next write (or this node's next start) tells. A file refused
    // for its content is taken as seen (its stamp kept): the same damaged file is not read and
    // verified again on every tick, only once it changes. Missing, or a read that failed for a
    // passing reason (EMFILE, EACCES: no stamp), is tried again.
    if (read === 'missing' || 'code' in read) {
      followedStamp = read === 'missing' ? undefined : stampUnder(read.stamp, trust);
      return undefined;
    }
    followedStamp = stampUnder(read.stamp, trust);
    const { entry, value } = read;
    if (entry.version < servedVersion() || servesSame(entry.version, () => Buffer.from(entry.bundle, 'utf8'), entry.bundle)) return undefined;
    const lowest = await floor();
    if (entry.version < lowest.version) return undefined;
    const appliedAt = entry.appliedAt !== undefined ? new Date(entry.appliedAt) : now();
    holder.swap(value, appliedAt);
    serving = entry;
    servingTrust = trust;
    logger.info({ version: entry.version, file: read.file }, 'config applied from the cache (written by the replica holding the control link)');
    warnUnservableRoutes(logger, entry.version, value);
    return { ok: true, version: entry.version, changed: true };
  };

  const enqueue = <T>(run: () => Promise<T>): Promise<T> => {
    const result = queue.then(run);
    queue = result.catch(() => undefined);
    return result;
  };

  return {
    apply: (push) => enqueue(() => applyNow(push)),
    followCache: () => enqueue(followNow),
    trust: () => trust,
    servedVersion,
    servedContentSha256,
    highestAppliedVersion: () => Math.max(servedVersion(), mark?.highest(trust) ?? 0),
    servesPreviousTrust,
    setTrust(next) {
      if (sameTrust(next, trust)) return false;
      logger.warn(
        { nodeId: next.nodeId, previousNodeId: trust.nodeId, signingKeyChanged: next.publicKeyPem.trim() !== trust.publicKeyPem.trim() },
        'config trust replaced (the node was re-enrolled): bundles are verified with the new identity from now on',
      );
      trust = next;
      return true;
    },
  };
}
