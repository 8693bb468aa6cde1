/**
 * Applying a pushed config bundle: verify (signature with the pinned key, canonical form, schema),
 * check it is for this node, apply the version rule (older: refused; equal: acknowledged again;
 * newer: applied), build the runtime config, write the cache (durably) and only then swap it in.
 * Pushes are applied one at a time in arrival order. Any refusal leaves the node on its last good
 * config and is reported with a code for the ack and a log line.
 */
import type { Logger } from '../logger.js';
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

export interface ConfigApplier {
  apply(push: ConfigPushInput): Promise<ApplyOutcome>;
}

export interface ConfigApplierOptions {
  trust: BundleTrust;
  cache: BundleCache;
  holder: ConfigHolder;
  logger: Logger;
  /** The cache entry of the bundle served now (from the cache at start-up); it becomes previous. */
  serving?: CachedBundle;
  /** Clock for "applied at". */
  now?: () => Date;
}

export function createConfigApplier(opts: ConfigApplierOptions): ConfigApplier {
  const { cache, holder, logger } = opts;
  const now = opts.now ?? (() => new Date());
  let serving = opts.serving;
  let queue: Promise<unknown> = Promise.resolve();

  const refuse = (version: number, code: ConfigRefusalCode, message: string, retryable = false): ApplyOutcome => {
    logger.warn({ version, code, reason: message }, 'config refused');
    return { ok: false, version, code, message, retryable };
  };

  const applyNow = async (push: ConfigPushInput): Promise<ApplyOutcome> => {
    const version = Number(push.version);
    const check = checkBundle(push.bundle, push.signature, opts.trust);
    if (!check.ok) return refuse(version, check.code, check.message);
    const { bundle } = check;
    if (bundle.version !== version) {
      return refuse(version, 'CONFIG_SCHEMA', `the push says version ${version} but its signed bundle is version ${bundle.version}`);
    }
    const applied = holder.appliedVersion();
    if (version < applied) {
      return refuse(version, 'CONFIG_VERSION_OLDER', `version ${version} is older than the applied version ${applied}`);
    }
    if (version === applied) {
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
      await cache.store(entry, serving);
    } catch (err) {
      // Not swapped: a config that would be lost on restart is not applied; the push may be retried.
      const code = (err as NodeJS.ErrnoException).code;
      return refuse(version, 'CONFIG_CACHE_WRITE_FAILED', `the bundle could not be written to ${cache.dir} (${code ?? (err as Error).message})`, true);
    }
    holder.swap(config, appliedAt);
    serving = entry;
    const unservable = [...config.unservableRoutes.keys()];
    logger.info({ version, ...(unservable.length > 0 ? { unservableRoutes: unservable.slice(0, 20) } : {}) }, 'config applied');
    return { ok: true, version, changed: true };
  };

  return {
    apply(push) {
      const result = queue.then(() => applyNow(push));
      queue = result.catch(() => undefined);
      return result;
    },
  };
}
