/**
 * What an enrolled node would serve at start-up, read without writing anything: the applied-version
 * mark and the config cache loaded with it as the floor. `serve` (enrolled-config.ts) and `doctor`
 * both load through here, so doctor cannot pass a state dir that serve refuses.
 */
import type { Logger } from '../logger.js';
import type { NodeIdentity } from '../state/identity.js';
import { openStateStore } from '../state/state-store.js';
import { AppliedVersionMark } from './applied-version.js';
import { BundleCache } from './bundle-cache.js';
import type { BundleTrust, CacheLoad } from './bundle-cache.js';
import { fromBundle } from './runtime-config.js';
import type { RuntimeConfig } from './runtime-config.js';

export interface StartupCache {
  cache: BundleCache;
  trust: BundleTrust;
  mark: AppliedVersionMark;
  /** The highest version the node applied under this trust (0: none). */
  highestApplied: number;
  load: CacheLoad<RuntimeConfig>;
}

/** Rejects with a StateFileError naming config-applied-version.json when that file is damaged. */
export async function readStartupCache(stateDir: string, identity: NodeIdentity, logger: Logger): Promise<StartupCache> {
  const cache = new BundleCache(stateDir);
  const trust = { nodeId: identity.nodeId, publicKeyPem: identity.configSigningPublicKeyPem };
  const mark = await AppliedVersionMark.open(await openStateStore(stateDir, { create: false }));
  const highestApplied = mark.highest(trust);
  const load = await cache.load(trust, fromBundle, logger, { highestApplied });
  return { cache, trust, mark, highestApplied, load };
}
