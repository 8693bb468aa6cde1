/**
 * An enrolled node's config at start-up: the verified cache (current, else previous) or not ready,
 * never an unverified config, and never one older than the highest version the node applied
 * (config-applied-version.json) unless current.json is damaged — then previous.json is served,
 * logged at error level and shown as older in /readyz and `status`; plus the applier that takes
 * pushed bundles from there on.
 */
import { CONTROL_STATUS_FILE } from '../control/control-status.js';
import type { ConfigStatusRecord } from '../control/control-status.js';
import type { Logger } from '../logger.js';
import { SPOOL_MARKER_FILE } from '../spool/spool-marker.js';
import { removeAbandonedWrites, removeInterruptedWrites } from '../state/atomic-write.js';
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
 * enroll/credential-write-lock.ts; config-applied-version.json: apply-bundle.ts and the start-up
 * catch-up below), so their interrupted writes can be swept under it.
 */
const LOCKED_ROOT_FILES = [CREDENTIAL_FILE, IDENTITY_FILE, APPLIED_VERSION_FILE] as const;

/**
 * State files in the state dir's root written without a lock replicas share (connect-loop.ts,
 * open-node-spool.ts): a temp file may be a live replica's write in progress, so only those over an
 * hour old are swept (removeAbandonedWrites).
 */
const UNLOCKED_ROOT_FILES = [CONTROL_STATUS_FILE, SPOOL_MARKER_FILE] as const;

/**
 * Removes the temp files a crash (kill -9, power loss) left mid-write of the config cache and of
 * LOCKED_ROOT_FILES: nothing else ever removes them, and they hold parts of secrets. Under
 * config-apply.lock, which every writer of those files holds, so a live replica's write in progress is
 * never taken for a leftover (an age limit would guess: a slow disk can take longer). Then those of
 * UNLOCKED_ROOT_FILES old enough that no write can still be in progress, without the lock (their
 * writers do not take it), so a busy lock does not keep them. A lock that cannot be taken (another
 * process holds it past the wait) or a dir that cannot be listed skips that sweep, logged: the next
 * start tries again.
 */
async function removeInterruptedStateWrites(stateDir: string, logger: Logger): Promise<void> {
  const cache = new BundleCache(stateDir);
  const root = path.resolve(stateDir);
  const removed: string[] = [];
  try {
    removed.push(
      ...(await underOpenLockAsync(path.join(root, CONFIG_APPLY_LOCK_FILE), async () => [
        ...(await cache.removeInterruptedWrites()).map((name) => `${CONFIG_CACHE_DIR}/${name}`),
        ...(await removeInterruptedWrites(root, LOCKED_ROOT_FILES)),
      ])),
    );
  } catch (err) {
    logger.warn({ err: { message: (err as Error).message } }, 'temp files of interrupted state writes not looked for; the next start tries again');
  }
  try {
    removed.push(...(await removeAbandonedWrites(root, UNLOCKED_ROOT_FILES)));
  } catch (err) {
    logger.warn({ err: { message: (err as Error).message } }, 'temp files of interrupted state writes not looked for; the next start tries again');
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
        // A cache written before the mark existed (or a mark write that failed): raise it now. Under
        // config-apply.lock, as apply-bundle.ts writes it: record() rereads the mark and writes only
        // a higher version, which holds only if no replica applying a newer config can write
        // between that read and this write (it would be lowered back to this older version).
        await underOpenLockAsync(path.join(path.resolve(stateDir), CONFIG_APPLY_LOCK_FILE), () => mark.record(entry.version, trust, appliedAt)).catch((err: unknown) => {
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
