// Two replicas can both hold the control link for a moment (control-link-leader.ts: a stale holder
// keeps going for at most one lock interval). A push the stale one checked before the other applied
// a newer version must not be written over it: the cache would go back to the older bundle, the
// mark too, and the next start would serve the older config (keys revoked since working again)
// or refuse the cache. The floor is checked again under a lock the replicas share, and the mark
// is never lowered by a process that read it earlier.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { ConfigPush } from '../../proto/src/index.js';
import { APPLIED_VERSION_FILE, AppliedVersionMark } from '../../edge-node/src/config/applied-version.js';
import { createConfigApplier } from '../../edge-node/src/config/apply-bundle.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { readStartupCache } from '../../edge-node/src/config/startup-cache.js';
import { createLogger } from '../../edge-node/src/logger.js';
import type { NodeIdentity } from '../../edge-node/src/state/identity.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import { bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';

const NODE_ID = 'node-under-test';
const logger = createLogger({ level: 'silent' });

t.test('a stale holder\'s older push is refused once another replica applied a newer one, and the next start serves the newer', async (t) => {
  const stateDir = t.testdir({});
  const signer = createSigner();
  const identity = { nodeId: NODE_ID, configSigningPublicKeyPem: signer.publicKeyPem } as NodeIdentity;
  const trust = { nodeId: NODE_ID, publicKeyPem: signer.publicKeyPem };
  const push = (version: number): ConfigPush => signedPush(testBundle({ nodeId: NODE_ID, version, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [bundleKey('k', newCallerKey().sha256)] }), signer);
  const seed = createConfigApplier({ trust, cache: (await readStartupCache(stateDir, identity, logger)).cache, holder: ConfigHolder.notReady('starting'), logger, mark: await AppliedVersionMark.open(await openStateStore(stateDir, { create: true })) });
  t.match(await seed.apply(push(5)), { ok: true, version: 5 });

  // Two replicas started on v5.
  const replica = async () => {
    const s = await readStartupCache(stateDir, identity, logger);
    const loaded = s.load.loaded!;
    return { mark: s.mark, applier: createConfigApplier({ trust, cache: s.cache, holder: ConfigHolder.ready(loaded.value), logger, mark: s.mark, serving: loaded.entry }) };
  };
  const a = await replica();
  const b = await replica();
  // A (the stale holder) pauses right after its first look at the mark, as a stalled process would.
  let resume!: () => void;
  const paused = new Promise<void>((r) => (resume = r));
  let reached!: () => void;
  const atPause = new Promise<void>((r) => (reached = r));
  const refresh = a.mark.refresh.bind(a.mark);
  let first = true;
  a.mark.refresh = async () => {
    await refresh();
    if (!first) return;
    first = false;
    reached();
    await paused;
  };
  const stale = a.applier.apply(push(6));
  await atPause;
  t.match(await b.applier.apply(push(7)), { ok: true, version: 7, changed: true }, 'B, the new holder, applies v7');
  resume();
  t.match(await stale, { ok: false, version: 6, code: 'CONFIG_VERSION_OLDER', message: /older than version 7, the highest this node applied/ });

  const next = await readStartupCache(stateDir, identity, logger);
  t.equal(next.highestApplied, 7, 'the mark still says 7');
  t.equal(next.load.loaded?.entry.version, 7, 'and the next start serves v7');
  t.same(next.load.refusals, []);
});

t.test('a process that read the mark earlier never lowers it', async (t) => {
  const stateDir = t.testdir({});
  const signer = createSigner();
  const trust = { nodeId: NODE_ID, publicKeyPem: signer.publicKeyPem };
  const store = await openStateStore(stateDir, { create: true });
  const early = await AppliedVersionMark.open(store);
  const other = await AppliedVersionMark.open(store);
  await other.record(7, trust, new Date());
  await early.record(6, trust, new Date());
  t.equal(JSON.parse(await readFile(path.join(stateDir, APPLIED_VERSION_FILE), 'utf8')).version, 7);
  t.equal(early.highest(trust), 7, 'and the early process now knows 7');
});
