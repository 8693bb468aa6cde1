// A start serving a cached config newer than config-applied-version.json raises the mark to it (a
// cache written before the mark existed, or a mark write that failed). It did so without
// config-apply.lock: between its reread of the mark and its write, another replica could apply a
// newer config (under the lock) and raise the mark, which the start then wrote back down to the
// older version. The catch-up now writes under the lock, so the other replica's write comes after.
import fsp from 'node:fs/promises';
import { readFileSync, writeFileSync } from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import path from 'node:path';
import t from 'tap';
import { loadAppliedVersion, signingKeySha256 } from '../../edge-node/src/config/applied-version.js';
import { loadEnrolledConfig } from '../../edge-node/src/config/enrolled-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { underOpenLock, underOpenLockAsync } from '../../edge-node/src/state/open-lock.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import { SIGNED_NODE_ID, signedConfigNode } from './signed-config-node.js';

const MARK_FILE = 'config-applied-version.json';

t.test('a start catching the applied-version mark up to its cache does not lower a newer version another replica applies meanwhile', async (t) => {
  const stateDir = t.testdir({});
  const { signer, identity, push } = signedConfigNode();
  const first = await loadEnrolledConfig(stateDir, identity, createLogger({ level: 'silent' }));
  t.match(await first.applier.apply(push(5)), { ok: true, version: 5 });

  const markFile = path.join(stateDir, MARK_FILE);
  const lockFile = path.join(stateDir, 'config-apply.lock');
  const markOf = (version: number): string =>
    `${JSON.stringify({ version, nodeId: SIGNED_NODE_ID, signingKeySha256: signingKeySha256(signer.publicKeyPem), appliedAt: new Date().toISOString() })}\n`;
  // The mark behind the cache (version 3 failed to be raised to 5): the next start catches it up.
  writeFileSync(markFile, markOf(3), { mode: 0o600 });

  /** Another replica applying version 6: it writes the mark holding config-apply.lock, as apply-bundle.ts does. */
  const otherReplicaApplies6 = (): void => {
    const current = (JSON.parse(readFileSync(markFile, 'utf8')) as { version: number }).version;
    if (current < 6) writeFileSync(markFile, markOf(6), { mode: 0o600 });
  };
  let markReads = 0;
  let otherReplica: 'applied at once' | 'waited for the lock' | undefined;
  // The start reads the mark twice: when it opens it, and again just before the catch-up writes it.
  // Right after that second read, the other replica applies version 6, when config-apply.lock lets it.
  const readFile = fsp.readFile;
  fsp.readFile = (async (...args: Parameters<typeof readFile>) => {
    const content = await readFile(...args);
    if (typeof args[0] === 'string' && args[0].endsWith(MARK_FILE) && ++markReads === 2) {
      try {
        underOpenLock(lockFile, otherReplicaApplies6, 0);
        otherReplica = 'applied at once';
      } catch {
        otherReplica = 'waited for the lock';
      }
    }
    return content;
  }) as typeof readFile;
  syncBuiltinESMExports();
  t.teardown(() => {
    fsp.readFile = readFile;
    syncBuiltinESMExports();
  });

  const restarted = await loadEnrolledConfig(stateDir, identity, createLogger({ level: 'silent' }));
  t.equal(restarted.holder.appliedVersion(), 5, 'the start serves the cached version 5');
  t.equal(markReads, 2, 'the start reread the mark before its catch-up write');
  t.equal(otherReplica, 'waited for the lock', 'the other replica could not write the mark while the catch-up held config-apply.lock');
  // The other replica's wait ends: it applies version 6 once the lock is free.
  if (otherReplica === 'waited for the lock') await underOpenLockAsync(lockFile, async () => otherReplicaApplies6());

  const mark = await loadAppliedVersion(await openStateStore(stateDir, { create: false }));
  t.equal(mark?.version, 6, 'the mark keeps the newer version the other replica applied');
});
