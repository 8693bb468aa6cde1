// The highest applied config version is kept in config-applied-version.json, apart from the cache,
// so an on-disk rollback of the cache (an older current.json, previous.json copied over it, current
// removed) is refused at start-up, and a damaged current.json falls back to previous.json only
// loudly (error log, /readyz and `status`).
import { copyFile, readFile, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import type { ConfigPush } from '../../proto/src/index.js';
import { APPLIED_VERSION_FILE } from '../../edge-node/src/config/applied-version.js';
import { BundleCache } from '../../edge-node/src/config/bundle-cache.js';
import { loadEnrolledConfig } from '../../edge-node/src/config/enrolled-config.js';
import { saveControlStatus } from '../../edge-node/src/control/control-status.js';
import { readiness } from '../../edge-node/src/http/readiness.routes.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { saveCredentials } from '../../edge-node/src/state/credential-store.js';
import { saveIdentity } from '../../edge-node/src/state/identity.js';
import type { NodeIdentity } from '../../edge-node/src/state/identity.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import { formatNodeStatus, readNodeStatus } from '../../edge-node/src/status/node-status.js';
import { createTestCa } from '../fixtures/tls.js';
import { bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';
import type { TestSigner } from './config-fixtures.js';

const NODE_ID = 'node-under-test';
const UPSTREAM = 'http://127.0.0.1:9/v1';

function identityOf(signer: TestSigner, nodeId = NODE_ID): NodeIdentity {
  return {
    nodeId,
    nodeName: 'edge-test',
    controlPlaneUrl: 'https://cp.example:8443',
    gateway: { target: '127.0.0.1:1', serverName: 'localhost', caPem: signer.publicKeyPem },
    configSigningPublicKeyPem: signer.publicKeyPem,
    enrolledAt: new Date().toISOString(),
  };
}

function logLines() {
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) } });
  return { lines, logger };
}

/** A state dir where the node applied v9 then v10 (the repro of the review). */
async function appliedNineThenTen(t: Test) {
  const stateDir = t.testdir({});
  const signer = createSigner();
  const identity = identityOf(signer);
  const push = (version: number): ConfigPush => signedPush(testBundle({ nodeId: NODE_ID, version, upstreamUrl: UPSTREAM, keys: [bundleKey('k', newCallerKey().sha256)] }), signer);
  const first = await loadEnrolledConfig(stateDir, identity, createLogger({ level: 'silent' }));
  t.match(await first.applier.apply(push(9)), { ok: true, version: 9 });
  t.match(await first.applier.apply(push(10)), { ok: true, version: 10 });
  return { stateDir, signer, identity, push, cache: new BundleCache(stateDir) };
}

t.test('the highest applied version is kept in its own 0600 state file', async (t) => {
  const { stateDir } = await appliedNineThenTen(t);
  const file = path.join(stateDir, APPLIED_VERSION_FILE);
  t.equal((await stat(file)).mode & 0o777, 0o600);
  t.match(JSON.parse(await readFile(file, 'utf8')), { version: 10, nodeId: NODE_ID, signingKeySha256: /^[0-9a-f]{64}$/ });
});

t.test('previous.json copied over current.json: the older cache is refused at start, naming both versions', async (t) => {
  const { stateDir, identity, push, cache } = await appliedNineThenTen(t);
  await copyFile(cache.file('previous'), cache.file('current'));
  const { lines, logger } = logLines();
  const started = await loadEnrolledConfig(stateDir, identity, logger);
  const snapshot = started.holder.current();
  t.equal(snapshot.ready, false, 'v9 is not served');
  if (!snapshot.ready) {
    t.match(snapshot.reason, /CONFIG_ROLLED_BACK/);
    t.match(snapshot.reason, /version 9/);
    t.match(snapshot.reason, /version 10/);
    t.match(snapshot.reason, new RegExp(APPLIED_VERSION_FILE.replace('.', '\\.')), 'says which file to delete to accept it anyway');
  }
  t.match(lines, [{ msg: 'config cache refused', code: 'CONFIG_ROLLED_BACK', level: 50 }], 'an error line');
  t.match(readiness({ holder: started.holder }), { ready: false, reason: /CONFIG_ROLLED_BACK/ });
  // The floor holds for pushes too: only version 10 or newer is taken.
  t.match(await started.applier.apply(push(9)), { ok: false, code: 'CONFIG_VERSION_OLDER', message: /highest this node applied/ });
  t.match(await started.applier.apply(push(10)), { ok: true, version: 10, changed: true });
  t.equal(started.holder.appliedVersion(), 10);
});

t.test('current.json removed: refused too, previous.json is not a silent way back', async (t) => {
  const { stateDir, identity, cache } = await appliedNineThenTen(t);
  await rm(cache.file('current'));
  const started = await loadEnrolledConfig(stateDir, identity, createLogger({ level: 'silent' }));
  t.match(started.holder.current(), { ready: false, reason: /CONFIG_ROLLED_BACK.*missing.*version 10/ });
});

t.test('a node serving nothing or an older version still reports its mark as its highest applied version, for hello', async (t) => {
  const { stateDir, identity, cache } = await appliedNineThenTen(t);
  const applied = await loadEnrolledConfig(stateDir, identity, createLogger({ level: 'silent' }));
  t.equal(applied.applier.highestAppliedVersion(), 10, 'serving v10');
  t.ok(applied.applier.servedContentSha256(), 'with its content hash');

  await rm(cache.file('current'));
  const notReady = await loadEnrolledConfig(stateDir, identity, createLogger({ level: 'silent' }));
  t.equal(notReady.applier.servedVersion(), 0, 'serves nothing');
  t.equal(notReady.applier.servedContentSha256(), undefined, 'so no content hash');
  t.equal(notReady.applier.highestAppliedVersion(), 10, 'the mark: versions below it are refused');
});

t.test('a damaged current.json: previous.json is served, at error level, and /readyz and status say it is older', async (t) => {
  const { stateDir, identity, push, cache } = await appliedNineThenTen(t);
  const current = JSON.parse(await readFile(cache.file('current'), 'utf8')) as { bundle: string };
  current.bundle = current.bundle.replace('"retries":0', '"retries":1');
  await writeFile(cache.file('current'), JSON.stringify(current));
  const { lines, logger } = logLines();
  const started = await loadEnrolledConfig(stateDir, identity, logger);
  t.equal(started.holder.appliedVersion(), 9);
  t.match(started.holder.current(), { ready: true, olderThanApplied: 10 });
  t.match(lines, [
    { msg: 'config cache refused', code: 'CONFIG_BAD_SIGNATURE', level: 50 },
    { level: 50, version: 9, highestApplied: 10, msg: /serving an OLDER config/ },
  ]);
  t.match(readiness({ holder: started.holder }), { ready: true, configVersion: 9, configWarning: /version 9.*previous\.json.*version 10/ });

  const store = await openStateStore(stateDir, { create: false });
  await saveCredentials(store, { current: { id: 'cred-1', secret: 'zn_cred_secret_for_status_only_000000000000', expiresAt: new Date(Date.now() + 86_400_000).toISOString() } });
  await saveIdentity(store, { ...identity, gateway: { ...identity.gateway, caPem: (await createTestCa()).certPem } });
  await saveControlStatus(store, {
    connected: false,
    since: new Date().toISOString(),
    lastError: null,
    sessionId: null,
    config: { ready: true, version: 9, appliedAt: new Date().toISOString(), notReadyReason: null },
    pid: process.pid,
    serving: true,
    updatedAt: new Date().toISOString(),
  });
  const report = await readNodeStatus(store);
  t.match(report.configWarning, /version 9.*version 10/);
  t.match(formatNodeStatus(report), /OLDER THAN APPLIED: serving config version 9/);

  // The control plane's v10 (or newer) ends it; v9 again is no news.
  t.match(await started.applier.apply(push(9)), { ok: false, code: 'CONFIG_VERSION_OLDER' });
  t.match(await started.applier.apply(push(10)), { ok: true, version: 10, changed: true });
  t.match(started.holder.current(), { ready: true });
  t.equal((started.holder.current() as { olderThanApplied?: number }).olderThanApplied, undefined);
  t.equal(readiness({ holder: started.holder }).configWarning, undefined);
});

t.test('a damaged current.json after the served version was sent again with other content (a restored control plane): previous.json, at that same version, is flagged too', async (t) => {
  const stateDir = t.testdir({});
  const signer = createSigner();
  const identity = identityOf(signer);
  const key = newCallerKey();
  const node = await loadEnrolledConfig(stateDir, identity, createLogger({ level: 'silent' }));
  // v7 with the key active, then v7 again with the key revoked.
  t.match(await node.applier.apply(signedPush(testBundle({ nodeId: NODE_ID, version: 7, upstreamUrl: UPSTREAM, keys: [bundleKey('k', key.sha256)] }), signer)), { ok: true, changed: true });
  const revoked = signedPush(testBundle({ nodeId: NODE_ID, version: 7, upstreamUrl: UPSTREAM, keys: [bundleKey('k', key.sha256, { status: 'revoked' })] }), signer);
  t.match(await node.applier.apply(revoked), { ok: true, changed: true });
  const cache = new BundleCache(stateDir);
  const current = JSON.parse(await readFile(cache.file('current'), 'utf8')) as { bundle: string };
  current.bundle = current.bundle.replace('"retries":0', '"retries":1');
  await writeFile(cache.file('current'), JSON.stringify(current));

  const { lines, logger } = logLines();
  const restarted = await loadEnrolledConfig(stateDir, identity, logger);
  const snapshot = restarted.holder.current();
  t.match(snapshot, { ready: true, olderThanApplied: 7 }, 'the replaced config, where the key is active again, is served as older than applied');
  t.ok(lines.some((l) => l.level === 50 && /serving an OLDER config/.test(String(l.msg))), 'logged at error level');
  t.match(readiness({ holder: restarted.holder }), { configWarning: /version 7 from config\/previous\.json .*other content of that version/ });
  t.match(await restarted.applier.apply(revoked), { ok: true, changed: true }, 'the control plane sending v7 again ends it');
  t.equal(readiness({ holder: restarted.holder }).configWarning, undefined);
});

t.test('a cache from before the mark existed is taken and marks its version', async (t) => {
  const { stateDir, identity } = await appliedNineThenTen(t);
  await rm(path.join(stateDir, APPLIED_VERSION_FILE));
  const started = await loadEnrolledConfig(stateDir, identity, createLogger({ level: 'silent' }));
  t.equal(started.holder.appliedVersion(), 10);
  t.match(JSON.parse(await readFile(path.join(stateDir, APPLIED_VERSION_FILE), 'utf8')), { version: 10 });
});

t.test('a mark of another trust (re-enrolled to another node or control plane) does not hold', async (t) => {
  const { stateDir } = await appliedNineThenTen(t);
  const other = createSigner();
  const started = await loadEnrolledConfig(stateDir, identityOf(other, 'node-other'), createLogger({ level: 'silent' }));
  const push = signedPush(testBundle({ nodeId: 'node-other', version: 3, upstreamUrl: UPSTREAM, keys: [] }), other);
  t.match(await started.applier.apply(push), { ok: true, version: 3 }, 'a lower version of the new control plane is taken');
});

t.test('a damaged mark file stops the start with a message naming it and what to do', async (t) => {
  const { stateDir, identity } = await appliedNineThenTen(t);
  await writeFile(path.join(stateDir, APPLIED_VERSION_FILE), '{"version":"ten"}');
  await t.rejects(loadEnrolledConfig(stateDir, identity, createLogger({ level: 'silent' })), { name: 'StateFileError', message: /config-applied-version\.json.*delete it/ });
  // Truncated JSON (damage on disk, a hand edit) gets the same advice.
  await writeFile(path.join(stateDir, APPLIED_VERSION_FILE), '{"version": 10, "nodeId"');
  await t.rejects(loadEnrolledConfig(stateDir, identity, createLogger({ level: 'silent' })), {
    name: 'StateFileError',
    message: /config-applied-version\.json: is not valid JSON .*delete it/,
  });
});
