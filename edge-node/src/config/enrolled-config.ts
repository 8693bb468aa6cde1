/**
 * An enrolled node's config at start-up: the verified cache (current, else previous) or not ready,
 * never an unverified config; plus the applier that takes pushed bundles from there on.
 */
import type { ConfigStatusRecord } from '../control/control-status.js';
import type { Logger } from '../logger.js';
import type { NodeIdentity } from '../state/identity.js';
import { createConfigApplier } from './apply-bundle.js';
import type { ConfigApplier } from './apply-bundle.js';
import { BundleCache, CONFIG_CACHE_DIR } from './bundle-cache.js';
import type { CacheLoad, CachedBundle } from './bundle-cache.js';
import { ConfigHolder } from './config-holder.js';
import { fromBundle } from './runtime-config.js';
import type { RuntimeConfig } from './runtime-config.js';

/** Why an enrolled node has no config, in words for /readyz and status (no absolute paths). */
function notReadyReason(load: CacheLoad<RuntimeConfig>): string {
  if (load.refusals.length === 0) return 'no config yet: waiting for the first config from the control plane';
  const refused = load.refusals.map((r) => `${CONFIG_CACHE_DIR}/${r.slot}.json: ${r.code}`).join('; ');
  return `the cached config was refused (${refused}); waiting for a config from the control plane`;
}

export interface EnrolledConfig {
  holder: ConfigHolder;
  applier: ConfigApplier;
}

/** The verified cache (current, else previous) or not ready; never an unverified config. */
export async function loadEnrolledConfig(stateDir: string, identity: NodeIdentity, logger: Logger): Promise<EnrolledConfig> {
  const cache = new BundleCache(stateDir);
  const trust = { nodeId: identity.nodeId, publicKeyPem: identity.configSigningPublicKeyPem };
  const load = await cache.load(trust, fromBundle, logger);
  let holder: ConfigHolder;
  let serving: CachedBundle | undefined;
  if (load.loaded !== undefined) {
    const { entry, file, value } = load.loaded;
    const appliedAt = entry.appliedAt !== undefined ? new Date(entry.appliedAt) : new Date();
    holder = ConfigHolder.ready(value, appliedAt);
    serving = entry;
    logger.info({ version: entry.version, file, appliedAt: appliedAt.toISOString() }, 'config loaded from cache');
  } else {
    const reason = notReadyReason(load);
    holder = ConfigHolder.notReady(reason);
    // Refused files are an operator's concern; a node that never got a config simply waits.
    if (load.refusals.length > 0) logger.error({ reason }, 'node not ready: no verified config');
    else logger.warn({ reason }, 'node not ready: no verified config');
  }
  const applier = createConfigApplier({ trust, cache, holder, logger, ...(serving !== undefined ? { serving } : {}) });
  return { holder, applier };
}

/** The served config as control-status.json mirrors it for `status`. */
export function configStatus(holder: ConfigHolder): ConfigStatusRecord {
  const snapshot = holder.current();
  return snapshot.ready
    ? { ready: true, version: snapshot.config.version, appliedAt: snapshot.appliedAt.toISOString(), notReadyReason: null }
    : { ready: false, version: null, appliedAt: null, notReadyReason: snapshot.reason };
}
