// Applying pushed bundles: verify → node id → version rule → cache write → swap, with a code and a
// log line for every refusal and the last good config kept.
import { sign } from 'node:crypto';
import { readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { canonicalJson, configContentSha256 } from '../../proto/src/index.js';
import type { ConfigPush } from '../../proto/src/index.js';
import { createConfigApplier } from '../../edge-node/src/config/apply-bundle.js';
import { BundleCache } from '../../edge-node/src/config/bundle-cache.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';
import type { TestSigner } from './config-fixtures.js';

const NODE_ID = 'node-under-test';
const UPSTREAM = 'http://127.0.0.1:9/v1';

function setup(t: Test, stateDir = t.testdir({})) {
  const signer = createSigner();
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) } });
  const cache = new BundleCache(stateDir);
  const holder = ConfigHolder.notReady('no config yet');
  const applier = createConfigApplier({ trust: { nodeId: NODE_ID, publicKeyPem: signer.publicKeyPem }, cache, holder, logger });
  const push = (version: number, overrides: Partial<Parameters<typeof testBundle>[0]> = {}, by: TestSigner = signer): ConfigPush =>
    signedPush(testBundle({ nodeId: NODE_ID, version, upstreamUrl: UPSTREAM, keys: [bundleKey('k', newCallerKey().sha256)], ...overrides }), by);
  return { signer, lines, cache, holder, applier, push, stateDir };
}

async function cachedVersion(file: string): Promise<number> {
  return (JSON.parse(await readFile(file, 'utf8')) as { version: number }).version;
}

t.test('a newer bundle is cached (0600, in a 0700 dir) and applied, and the one it replaces becomes previous', async (t) => {
  const { applier, holder, cache, lines, push } = setup(t);
  t.same(await applier.apply(push(1)), { ok: true, version: 1, changed: true });
  t.equal(holder.appliedVersion(), 1);
  t.equal((await stat(cache.file('current'))).mode & 0o777, 0o600);
  t.equal((await stat(cache.dir)).mode & 0o777, 0o700);
  await t.rejects(stat(cache.file('previous')), { code: 'ENOENT' }, 'no previous before the second version');
  t.match(lines.find((l) => l.msg === 'config applied'), { version: 1 });

  const second = push(2);
  t.same(await applier.apply(second), { ok: true, version: 2, changed: true });
  t.equal(await cachedVersion(cache.file('current')), 2);
  t.equal(await cachedVersion(cache.file('previous')), 1);
  t.equal((await stat(cache.file('previous'))).mode & 0o777, 0o600);

  const stored = JSON.parse(await readFile(cache.file('current'), 'utf8')) as { bundle: string; signature: string };
  t.equal(stored.bundle, canonicalJson(JSON.parse(stored.bundle)), 'the bundle is kept as its exact signed canonical text');

  const before = await readFile(cache.file('current'), 'utf8');
  t.same(await applier.apply(second), { ok: true, version: 2, changed: false }, 'the same bundle again is acknowledged without a change');
  t.equal(await readFile(cache.file('current'), 'utf8'), before, 'and nothing is rewritten');
});

t.test('a push of the served version with other content (a restored control plane) is applied; the same content issued again is not', async (t) => {
  const { applier, holder, cache, push } = setup(t);
  const before = newCallerKey();
  const after = newCallerKey();
  t.match(await applier.apply(push(7, { keys: [bundleKey('k', before.sha256)] })), { ok: true, version: 7, changed: true });

  // After a restore, the control plane's version 7 is another config: here the key is revoked.
  const other = push(7, { keys: [bundleKey('k', before.sha256, { status: 'revoked' }), bundleKey('k2', after.sha256)] });
  t.same(await applier.apply(other), { ok: true, version: 7, changed: true }, 'applied, not acknowledged as already applied');
  const snapshot = holder.current();
  t.ok(snapshot.ready && snapshot.config.apiKeys?.has(after.sha256) === true, 'the new content is served');
  t.equal(JSON.parse(await readFile(cache.file('current'), 'utf8')).bundle, Buffer.from(other.bundle).toString('utf8'), 'and cached');
  t.same(applier.servedContentSha256(), configContentSha256(other.bundle), 'hello reports the served content');
  t.equal(applier.highestAppliedVersion(), 7);

  // The same config built again by another replica differs only in issuedAt: nothing to apply.
  const reissued = push(7, { keys: [bundleKey('k', before.sha256, { status: 'revoked' }), bundleKey('k2', after.sha256)], issuedAt: '2030-01-01T00:00:00.000Z' });
  t.notSame(Buffer.from(reissued.bundle), Buffer.from(other.bundle), 'the bytes differ');
  const cached = await readFile(cache.file('current'), 'utf8');
  t.same(await applier.apply(reissued), { ok: true, version: 7, changed: false });
  t.equal(await readFile(cache.file('current'), 'utf8'), cached, 'nothing is rewritten');
});

t.test('a bundle with routes the node cannot serve is applied, and a warning names each alias and why', async (t) => {
  // The control plane refuses such routes now, but an older database may hold one; the node acks
  // the version all the same, so only its log can tell the operator why calls to the alias get 404.
  const { applier, holder, lines, push } = setup(t);
  const claude = { id: 'up-2', name: 'claude', kind: 'anthropic' as const, baseUrl: 'https://api.anthropic.example/v1', apiKey: 'sk-ant-0123456789', timeoutMs: 30_000 };
  const mixed = push(1, {
    upstreams: [...testBundle({ nodeId: NODE_ID, version: 1, upstreamUrl: UPSTREAM, keys: [] }).upstreams, claude],
    routes: [
      { alias: 'echo', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 },
      { alias: 'mixed', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [{ upstream: 'claude', model: 'claude-3' }], timeoutMs: 30_000, retries: 0 },
    ],
  });
  t.same(await applier.apply(mixed), { ok: true, version: 1, changed: true });
  t.equal(holder.appliedVersion(), 1);
  const warning = lines.find((l) => l.level === 40 && l.version === 1);
  t.match(warning, {
    msg: /cannot serve.*ZN_ERR_MODEL_NOT_FOUND/,
    count: 1,
    unservableRoutes: [{ alias: 'mixed', reason: 'its targets mix OpenAI-compatible and Anthropic upstreams' }],
  });
  t.notMatch(JSON.stringify(warning), /sk-ant-/, 'no upstream secret in the warning');
  t.same(await applier.apply(push(2)), { ok: true, version: 2, changed: true });
  t.notOk(lines.some((l) => l.level === 40 && l.version === 2), 'a config without such routes warns of nothing');
});

t.test('every refusal has its code, a log line naming version and code, and leaves the last good config served', async (t) => {
  const { applier, holder, lines, push, signer } = setup(t);
  await applier.apply(push(5));
  const served = holder.current();

  const stranger = createSigner();
  const schemaBroken = signedPush({ ...testBundle({ nodeId: NODE_ID, version: 9, upstreamUrl: UPSTREAM, keys: [] }), surprise: true }, signer);
  const notCanonicalBytes = Buffer.from(JSON.stringify(testBundle({ nodeId: NODE_ID, version: 9, upstreamUrl: UPSTREAM, keys: [] }), null, 2));
  const notCanonical: ConfigPush = { version: 9n, bundle: notCanonicalBytes, signature: sign(null, notCanonicalBytes, signer.privateKey), keyId: signer.keyId };
  const duplicateAlias = push(9, {
    routes: [
      { alias: 'echo', targets: [{ upstream: 'demo', model: 'a', weight: 1 }], fallbacks: [], timeoutMs: 1000, retries: 0 },
      { alias: 'echo', targets: [{ upstream: 'demo', model: 'b', weight: 1 }], fallbacks: [], timeoutMs: 1000, retries: 0 },
    ],
  });
  const cases: Array<[string, ConfigPush, string]> = [
    ['signed with another key', push(6, {}, stranger), 'CONFIG_BAD_SIGNATURE'],
    ['a signature over other bytes', { ...push(6), signature: push(7).signature }, 'CONFIG_BAD_SIGNATURE'],
    ['older than the applied version', push(4), 'CONFIG_VERSION_OLDER'],
    ['not matching the schema', schemaBroken, 'CONFIG_SCHEMA'],
    ['not canonical JSON', notCanonical, 'CONFIG_NOT_CANONICAL'],
    ['for another node', signedPush(testBundle({ nodeId: 'someone-else', version: 9, upstreamUrl: UPSTREAM, keys: [] }), signer), 'CONFIG_WRONG_NODE'],
    ['a push version that is not the bundle version', signedPush(testBundle({ nodeId: NODE_ID, version: 9, upstreamUrl: UPSTREAM, keys: [] }), signer, 10), 'CONFIG_SCHEMA'],
    ['a bundle that cannot be served (duplicate alias)', duplicateAlias, 'CONFIG_APPLY_FAILED'],
  ];
  for (const [what, bad, code] of cases) {
    const outcome = await applier.apply(bad);
    t.match(outcome, { ok: false, version: Number(bad.version), code, message: /\w/, retryable: false }, `refused: ${what}`);
    t.ok(lines.some((l) => l.msg === 'config refused' && l.code === code && l.version === Number(bad.version)), `logged: ${what}`);
    t.equal(holder.current(), served, `still serving version 5 after: ${what}`);
  }
  t.same(await applier.apply(push(6)), { ok: true, version: 6, changed: true }, 'a good newer bundle still applies afterwards');
});

t.test('a bundle that cannot be written to the cache is not applied and is refused as retryable', async (t) => {
  const stateDir = t.testdir({});
  // A plain file where the cache directory should be: every write under it fails.
  await writeFile(path.join(stateDir, 'config'), 'not a directory');
  const { applier, holder, lines, push } = setup(t, stateDir);
  const outcome = await applier.apply(push(1));
  t.match(outcome, { ok: false, version: 1, code: 'CONFIG_CACHE_WRITE_FAILED', retryable: true });
  t.equal(holder.current().ready, false, 'nothing was swapped in');
  t.ok(lines.some((l) => l.msg === 'config refused' && l.code === 'CONFIG_CACHE_WRITE_FAILED'));
});

t.test('pushes arriving together are applied one at a time and end on the newest', async (t) => {
  const { applier, holder, cache, push } = setup(t);
  const outcomes = await Promise.all(Array.from({ length: 50 }, (_, i) => applier.apply(push(i + 1))));
  t.ok(outcomes.every((o) => o.ok), 'each was applied in turn');
  t.equal(holder.appliedVersion(), 50);
  t.equal(await cachedVersion(cache.file('current')), 50);
  t.equal(await cachedVersion(cache.file('previous')), 49);
});
