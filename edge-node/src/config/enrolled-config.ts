/**
 * An enrolled node's config at start-up: the verified cache (current, else previous) or not ready,
 * never an unverified config, and never one older than the highest version the node applied
 * (config-applied-version.json) unless current.json is damaged — then previous.json is served,
 * logged at error level and shown as older in /readyz and `status`; plus the applier that takes
 * pushed bundles from there on.
 */
import type { ConfigStatusRecord } from '../control/control-status.js';
import type { Logger } from '../logger.js';
import { removeInterruptedWrites } from '../state/atomic-write.js';
import { CREDENTIAL_FILE } from '../state/credential-store.js';
import { IDENTITY_FILE } from '../state/identity.js';
import type { NodeIdentity } from '../state/identity.js';
import { underOpenLockAsync } from '../state/open-lock.js';
import path from 'node:path';
import { createConfigApplier } from './apply-bundle.js';
import { APPLIED_VERSION_FILE, CONFIG_APPLY_LOCK_FILE } from './applied-version.js';
import type { ConfigApplier } from './apply-bundle.js';
import { BundleCache, CONFIG_CACHE_DIR } from './bundle-cache.js';
import type { CacheLoad, CachedBundle } from './bundle-cache.js';
import { ConfigHolder } from './config-holder.js';
import type { RuntimeConfig } from './runtime-config.js';
import { readStartupCache } from './startup-cache.js';

/** Why an enrolled node has no config, in words for /readyz and status (no absolute paths). */
function notReadyReason(load: CacheLoad<RuntimeConfig>): string {
  if (load.refusals.length === 0) return 'no config yet: waiting for the first config from the control plane';
  const rolledBack = load.refusals.find((r) => r.code === 'CONFIG_ROLLED_BACK');
  if (rolledBack !== undefined) return `${CONFIG_CACHE_DIR}/${rolledBack.slot}.json refused (CONFIG_ROLLED_BACK): ${rolledBack.message}`;
  const refused = load.refusals.map((r) => `${CONFIG_CACHE_DIR}/${r.slot}.json: ${r.code}`).join('; ');
  return `the cached config was refused (${refused}); waiting for a config from the control plane`;
}

export interface EnrolledConfig {
  holder: ConfigHolder;
  applier: ConfigApplier;
}

/**
 * State files in the state dir's root whose every writer holds config-apply.lock (credential-store.ts,
 * enroll/credential-write-lock.ts), so their interrupted writes can be swept under it. Not
 * config-applied-version.json (the start-up catch-up below writes it unlocked), nor
 * control-status.json or the spool marker (written without that lock).
 */
const LOCKED_ROOT_FILES = [CREDENTIAL_FILE, IDENTITY_FILE] as const;

/**
 * Removes the temp files a crash (kill -9, power loss) left mid-write of the config cache and of
 * LOCKED_ROOT_FILES: nothing else ever removes them, and they hold parts of secrets. Under
 * config-apply.lock, which every writer of those files holds, so a live replica's write in progress is
 * never taken for a leftover (an age limit would guess: a slow disk can take longer). A lock that
 * cannot be taken (another process holds it past the wait) or a dir that cannot be listed skips the
 * sweep, logged: the next start tries again.
 */
async function removeInterruptedStateWrites(stateDir: string, logger: Logger): Promise<void> {
  const cache = new BundleCache(stateDir);
  const root = path.resolve(stateDir);
  let removed: string[];
  try {
    removed = await underOpenLockAsync(path.join(root, CONFIG_APPLY_LOCK_FILE), async () => [
      ...(await cache.removeInterruptedWrites()).map((name) => `${CONFIG_CACHE_DIR}/${name}`),
      ...(await removeInterruptedWrites(root, LOCKED_ROOT_FILES)),
    ]);
  } catch (err) {
    logger.warn({ err: { message: (err as Error).message } }, 'temp files of interrupted state writes not looked for; the next start tries again');
    return;
  }
  if (removed.length > 0) logger.info({ files: removed }, 'removed temp files left by interrupted state writes (a crash mid-write)');
}

/** The verified cache (current, else previous) or not ready; never an unverified or rolled-back config. */
export async function loadEnrolledConfig(stateDir: string, identity: NodeIdentity, logger: Logger): Promise<EnrolledConfig> {
  await removeInterruptedStateWrites(stateDir, logger);
  const { cache, trust, mark, highestApplied, load } = await readStartupCache(stateDir, identity, logger);
  let holder: ConfigHolder;
  let serving: CachedBundle | undefined;
  let servingStamp: string | undefined;
  if (load.loaded !== undefined) {
    const { entry, file, value, olderThanApplied, slot, stamp } = load.loaded;
    if (slot === 'current') servingStamp = stamp;
    const appliedAt = entry.appliedAt !== undefined ? new Date(entry.appliedAt) : new Date();
    holder = ConfigHolder.ready(value, appliedAt, olderThanApplied);
    serving = entry;
    if (olderThanApplied !== undefined) {
      const refused = load.refusals.map((r) => `${CONFIG_CACHE_DIR}/${r.slot}.json: ${r.code}`).join('; ');
      logger.error(
        { version: entry.version, highestApplied: olderThanApplied, file, refused },
        `serving an OLDER config: ${CONFIG_CACHE_DIR}/current.json is damaged (${refused}), so version ${entry.version} from ${CONFIG_CACHE_DIR}/previous.json is served although this node already applied version ${olderThanApplied}; keys revoked since may work until the control plane sends version ${olderThanApplied} or newer`,
      );
    } else {
      logger.info({ version: entry.version, file, appliedAt: appliedAt.toISOString() }, 'config loaded from cache');
      if (entry.version > highestApplied) {
        // A cache written before the mark existed (or a mark write that failed): raise it now.
        await mark.record(entry.version, trust, appliedAt).catch((err: unknown) => {
          logger.warn({ err: { message: (err as Error).message }, file: mark.file() }, `could not write ${APPLIED_VERSION_FILE}`);
        });
      }
    }
  } else {
    const reason = notReadyReason(load);
    holder = ConfigHolder.notReady(reason);
    // Refused files are an operator's concern; a node that never got a config simply waits.
    if (load.refusals.length > 0) logger.error({ reason }, 'node not ready: no verified config');
    else logger.warn({ reason }, 'node not ready: no verified config');
  }
  const applier = createConfigApplier({ trust, cache, holder, logger, mark, ...(serving !== undefined ? { serving } : {}), ...(servingStamp !== undefined ? { servingStamp } : {}) });
  return { holder, applier };
}

/** For /readyz and `status`: the served config is older than one the node applied. */
export function olderConfigWarning(version: number, highestApplied: number): string {
  const applied = version === highestApplied ? `other content of that version (sent again by its control plane)` : `version ${highestApplied}`;
  return `serving config version ${version} from ${CONFIG_CACHE_DIR}/previous.json because ${CONFIG_CACHE_DIR}/current.json is damaged; this node already applied ${applied} (keys revoked since may work until the control plane sends it again)`;
}

/** For /readyz and `status`: the served config verified under an earlier enrollment's trust. */
export function previousEnrollmentWarning(version: number): string {
  return `serving config version ${version} of this node's previous enrollment (re-enrolled while serving): its API keys, upstreams and routes are the previous installation's until the control plane this node is enrolled with now sends its config`;
}

/** The served config as control-status.json mirrors it for `status` (`applier`: an enrolled node's). */
export function configStatus(holder: ConfigHolder, applier?: Pick<ConfigApplier, 'servesPreviousTrust'>): ConfigStatusRecord {
  const snapshot = holder.current();
  if (!snapshot.ready) return { ready: false, version: null, appliedAt: null, notReadyReason: snapshot.reason };
  return {
    ready: true,
    version: snapshot.config.version,
    appliedAt: snapshot.appliedAt.toISOString(),
    notReadyReason: null,
    ...(applier?.servesPreviousTrust() === true ? { previousEnrollment: true } : {}),
  };
}
