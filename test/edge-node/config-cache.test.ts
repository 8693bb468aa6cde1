// Loading the config cache at start-up: each file is verified like a push; a refused current is
// named in a log line and previous is used; nothing unverified is ever handed out.
import { readFile, writeFile } from 'node:fs/promises';
import t from 'tap';
import type { Test } from 'tap';
import { BundleCache } from '../../edge-node/src/config/bundle-cache.js';
import type { CachedBundle } from '../../edge-node/src/config/bundle-cache.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';
import type { TestSigner } from './config-fixtures.js';

const NODE_ID = 'node-under-test';

function entry(version: number, signer: TestSigner, nodeId = NODE_ID): CachedBundle {
  const push = signedPush(testBundle({ nodeId, version, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [bundleKey('k', newCallerKey().sha256)] }), signer);
  return { version, bundle: push.bundle.toString('utf8'), signature: push.signature.toString('base64') };
}

async function cacheWith(t: Test, current: CachedBundle, previous?: CachedBundle) {
  const cache = new BundleCache(t.testdir({}));
  await cache.store(current, previous);
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger({ destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) } });
  return { cache, lines, logger };
}

/** Rewrites a cache file through `edit` of its parsed JSON. */
async function tamper(file: string, edit: (value: Record<string, unknown>) => void): Promise<void> {
  const value = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
  edit(value);
  await writeFile(file, JSON.stringify(value));
}

/** The same bundle text with one field changed: the signature no longer covers it. */
function raiseTimeouts(value: Record<string, unknown>): void {
  value.bundle = (value.bundle as string).replace('"timeoutMs":30000', '"timeoutMs":30001');
}

t.test('a verified current is loaded without a word about previous', async (t) => {
  const signer = createSigner();
  const { cache, lines, logger } = await cacheWith(t, entry(2, signer), entry(1, signer));
  const load = await cache.load({ nodeId: NODE_ID, publicKeyPem: signer.publicKeyPem }, fromBundle, logger);
  t.match(load, { loaded: { slot: 'current', entry: { version: 2 }, value: { version: 2, source: 'bundle' } }, refusals: [], missing: [] });
  t.same(lines, []);
});

t.test('a tampered current.json is refused with a log line naming the file and code, and previous is used', async (t) => {
  const signer = createSigner();
  const { cache, lines, logger } = await cacheWith(t, entry(2, signer), entry(1, signer));
  await tamper(cache.file('current'), raiseTimeouts);
  const load = await cache.load({ nodeId: NODE_ID, publicKeyPem: signer.publicKeyPem }, fromBundle, logger);
  t.match(load.loaded, { slot: 'previous', entry: { version: 1 } });
  t.match(load.refusals, [{ slot: 'current', code: 'CONFIG_BAD_SIGNATURE', file: cache.file('current') }]);
  t.match(lines, [{ msg: 'config cache refused', file: cache.file('current'), code: 'CONFIG_BAD_SIGNATURE', level: 50 }]);
});

t.test('when both files are refused nothing is loaded, and each refusal is logged', async (t) => {
  const signer = createSigner();
  const { cache, lines, logger } = await cacheWith(t, entry(2, signer), entry(1, signer));
  await tamper(cache.file('current'), raiseTimeouts);
  await writeFile(cache.file('previous'), '{"version": 1, "bundle": ');
  const load = await cache.load({ nodeId: NODE_ID, publicKeyPem: signer.publicKeyPem }, fromBundle, logger);
  t.equal(load.loaded, undefined);
  t.match(load.refusals, [{ slot: 'current', code: 'CONFIG_BAD_SIGNATURE' }, { slot: 'previous', code: 'CONFIG_CACHE_CORRUPT' }]);
  t.equal(lines.filter((l) => l.msg === 'config cache refused').length, 2);
});

t.test('files that verify but do not fit are refused: another node, a version the bundle does not carry, another signing key', async (t) => {
  const signer = createSigner();
  const trust = { nodeId: NODE_ID, publicKeyPem: signer.publicKeyPem };

  const other = await cacheWith(t, entry(3, signer, 'another-node'));
  t.match((await other.cache.load(trust, fromBundle, other.logger)).refusals, [{ code: 'CONFIG_WRONG_NODE' }], 'a bundle for another node id');

  const relabelled = await cacheWith(t, entry(3, signer));
  await tamper(relabelled.cache.file('current'), (v) => (v.version = 99));
  t.match((await relabelled.cache.load(trust, fromBundle, relabelled.logger)).refusals, [{ code: 'CONFIG_CACHE_CORRUPT' }], 'an envelope version that is not the bundle version');

  const foreign = await cacheWith(t, entry(3, createSigner()));
  t.match((await foreign.cache.load(trust, fromBundle, foreign.logger)).refusals, [{ code: 'CONFIG_BAD_SIGNATURE' }], 'a bundle signed with another key');

  const empty = new BundleCache(t.testdir({}));
  t.match(await empty.load(trust, fromBundle, other.logger), { loaded: undefined, refusals: [], missing: ['current', 'previous'] }, 'no cache at all is no refusal');
});
