// The config bundle a node gets is what PostgreSQL holds at one version, scoped to that node,
// canonical, and signed with the installation's config-signing key — built directly and through
// the gateway's cached publisher, which must produce the very same bytes.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { BundleBuildError, buildNodeBundle, configSigningKeyId, encodeSignedBundle } from '../../control-plane/src/config/bundle-builder.js';
import { latestConfigVersion, recordConfigChange } from '../../control-plane/src/config/config-changes.js';
import { ConfigPublisher } from '../../control-plane/src/config/config-publisher.js';
import { createSecretBox, SecretBoxError } from '../../control-plane/src/crypto/secret-box.js';
import { deleteNode } from '../../control-plane/src/nodes/node-admin.js';
import { withTransaction } from '../../control-plane/src/nodes/with-transaction.js';
import { bundleApiKeySchema } from '../../proto/src/config-bundle.js';
import { canonicalJson, verifyConfigBundle } from '../../proto/src/index.js';
import { testDatabase } from '../fixtures/postgres.js';
import { GUARDRAIL_RULES, changeConfig, seedConfig } from './bundle-seed.js';
import { enrolledNode, gatewaySettings, harnessSecretBox, harnessSigningKey, migratedPool } from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const settings = gatewaySettings(db.url);
const signingKey = await harnessSigningKey(pool);

t.test("a node's bundle holds what the database holds at the latest version, scoped to the node", async (t) => {
  const seeded = await seedConfig(pool, harnessSecretBox);
  const node = await enrolledNode(pool, settings);
  await pool.query('update nodes set spool_quota_gb = 3, spool_full_policy = $2 where id = $1', [node.id, 'metering-only']);
  const bundle = await buildNodeBundle(pool, node.id, harnessSecretBox);

  t.equal(bundle.version, await latestConfigVersion(pool), 'the latest version');
  t.ok(bundle.version >= seeded.version);
  t.equal(bundle.nodeId, node.id);
  t.equal(bundle.nodeName, node.name);
  t.same(bundle.node, { surfaces: ['model'], spool: { quotaBytes: 3 * 2 ** 30, fullPolicy: 'metering-only' } });

  t.same(bundle.accounts.find((a) => a.id === seeded.accountId), {
    id: seeded.accountId, name: seeded.accountName, status: 'active',
    limits: { requestsPerMinute: 600, tokensPerMinute: 5_000_000_000, concurrentRequests: 8 },
  }, 'the account with its policy resolved into limits');
  t.same(bundle.apiKeys.find((k) => k.id === seeded.keyId), {
    id: seeded.keyId, accountId: seeded.accountId, name: `key-${seeded.tag}`, sha256: seeded.keySha256,
    allowedModels: [seeded.routeAlias], expiresAt: seeded.keyExpiresAt, status: 'active', limits: {},
    guardrailPolicyId: seeded.guardrailPolicyId,
  }, 'the key by its hash, with its models, expiry and guardrail policy');
  t.equal(bundle.apiKeys.find((k) => k.id === seeded.revokedKeyId)?.status, 'revoked', 'a revoked key is listed as revoked, not left out');
  t.notOk(JSON.stringify(bundle).includes(seeded.keySecret), 'never the key itself');

  t.same(bundle.upstreams.find((u) => u.name === seeded.upstreamName), {
    id: seeded.upstreamId, name: seeded.upstreamName, kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1',
    apiKey: seeded.upstreamSecret, timeoutMs: 30_000,
  }, 'the routed upstream with its secret decrypted');
  t.notOk(bundle.upstreams.some((u) => u.name === seeded.unusedUpstreamName), 'an upstream no route uses is not shipped');
  t.notOk(JSON.stringify(bundle).includes(seeded.unusedUpstreamSecret), 'nor its secret');

  t.same(bundle.routes.find((r) => r.alias === seeded.routeAlias), {
    alias: seeded.routeAlias, targets: [{ upstream: seeded.upstreamName, model: 'gpt-x', weight: 3 }],
    fallbacks: [{ upstream: seeded.upstreamName, model: 'gpt-y' }], timeoutMs: 45_000, retries: 1,
  });
  t.same(bundle.guardrailPolicies.find((g) => g.id === seeded.guardrailPolicyId)?.rules, GUARDRAIL_RULES);
  t.same(bundle.prices.find((p) => p.model === seeded.priceModel), {
    model: seeded.priceModel, inputMicrosPerToken: 2, outputMicrosPerToken: 9_007_199_254_740_991, requestMicros: 100,
  }, 'prices as exact integers, the largest one too');
});

t.test('deleted rows leave the bundle; a deleted account takes its keys along, a deleted policy its limits', async (t) => {
  const seeded = await seedConfig(pool, harnessSecretBox);
  const node = await enrolledNode(pool, settings);
  await withTransaction(pool, async (c) => {
    await c.query('update rate_limit_policies set deleted_at = now() where id = $1', [seeded.rateLimitPolicyId]);
    await c.query('update routes set deleted_at = now() where alias = $1', [seeded.routeAlias]);
  });
  const afterPolicy = await buildNodeBundle(pool, node.id, harnessSecretBox);
  t.same(afterPolicy.accounts.find((a) => a.id === seeded.accountId)?.limits, {}, 'no limits from a deleted policy');
  t.notOk(afterPolicy.routes.some((r) => r.alias === seeded.routeAlias), 'the deleted route is gone');
  t.notOk(afterPolicy.upstreams.some((u) => u.name === seeded.upstreamName), 'and with it the only reason to ship its upstream');

  await pool.query('update accounts set deleted_at = now() where id = $1', [seeded.accountId]);
  const afterAccount = await buildNodeBundle(pool, node.id, harnessSecretBox);
  t.notOk(afterAccount.accounts.some((a) => a.id === seeded.accountId));
  t.notOk(afterAccount.apiKeys.some((k) => k.accountId === seeded.accountId), "the account's keys are gone (unknown to the node)");
});

t.test("a key's allowedToolServers are in the bundle when set and left out when null, so an older node's strict schema takes every unrestricted key", async (t) => {
  const seeded = await seedConfig(pool, harnessSecretBox);
  const node = await enrolledNode(pool, settings);
  const restrictedKeyId = await withTransaction(pool, async (c) => {
    const { rows } = await c.query<{ id: string }>(
      `insert into api_keys (account_id, name, key_hash, key_prefix, allowed_tool_servers)
       values ($1, $2, $3, 'zn_sk_tools', $4) returning id`,
      [seeded.accountId, `tools-${seeded.tag}`, randomBytes(32), ['crm-lookup', 'mail-send']]);
    await recordConfigChange(c, { entity: 'api-key', entityId: rows[0]!.id, action: 'create' });
    return rows[0]!.id;
  });
  const bundle = await buildNodeBundle(pool, node.id, harnessSecretBox);
  const restricted = bundle.apiKeys.find((k) => k.id === restrictedKeyId)!;
  const unrestricted = bundle.apiKeys.find((k) => k.id === seeded.keyId)!;
  t.same(restricted.allowedToolServers, ['crm-lookup', 'mail-send'], 'the restricted key carries its list');
  t.notOk('allowedToolServers' in unrestricted, 'a key whose list is null carries no such field');
  t.notMatch(canonicalJson(unrestricted), /allowedToolServers/, 'nor does its canonical JSON: the bytes are those of a bundle before the field');

  const signed = encodeSignedBundle(bundle, signingKey);
  const check = verifyConfigBundle(signed.bytes, signed.signature, signingKey.publicKeyPem);
  t.ok(check.ok, check.ok ? 'the bundle verifies' : `${check.code}: ${check.message}`);
  // What a node from before the field checks keys with: the same strict schema without it.
  const olderNodeKeySchema = bundleApiKeySchema.omit({ allowedToolServers: true });
  t.ok(olderNodeKeySchema.safeParse(unrestricted).success, 'an older node takes the unrestricted key');
  t.notOk(olderNodeKeySchema.safeParse(restricted).success, 'and refuses the restricted one (it keeps its cached config: fail closed)');
});

t.test('the signed bundle verifies with the public key nodes pinned, and a changed byte does not', async (t) => {
  await seedConfig(pool, harnessSecretBox);
  const node = await enrolledNode(pool, settings);
  const bundle = await buildNodeBundle(pool, node.id, harnessSecretBox);
  const signed = encodeSignedBundle(bundle, signingKey);
  t.equal(signed.version, bundle.version);
  t.equal(signed.bytes.toString('utf8'), canonicalJson(bundle), 'the bytes are the canonical JSON');
  t.match(signed.keyId, /^ed25519:[0-9a-f]{16}$/);
  t.equal(signed.keyId, configSigningKeyId(signingKey.publicKeyPem), 'the key id is a fingerprint of the public key');

  const check = verifyConfigBundle(signed.bytes, signed.signature, signingKey.publicKeyPem);
  t.ok(check.ok, check.ok ? 'verifies' : `${check.code}: ${check.message}`);
  if (check.ok) t.same(check.bundle, bundle, 'and parses back to the same bundle');

  const tampered = Buffer.from(signed.bytes);
  tampered[tampered.length - 2]! ^= 1;
  const refused = verifyConfigBundle(tampered, signed.signature, signingKey.publicKeyPem);
  t.equal(refused.ok ? 'ok' : refused.code, 'CONFIG_BAD_SIGNATURE');
});

t.test("the publisher's bundle is byte for byte the canonical bundle, and is built once per version per node", async (t) => {
  await seedConfig(pool, harnessSecretBox);
  const node = await enrolledNode(pool, settings);
  const issuedAt = new Date('2030-01-02T03:04:05.678Z');
  const publisher = new ConfigPublisher({ pool, secretBox: harnessSecretBox, signingKey, now: () => issuedAt });

  const first = await publisher.bundleFor(node.id);
  if (first === undefined) throw new Error('no bundle for a live node');
  const direct = await buildNodeBundle(pool, node.id, harnessSecretBox);
  direct.issuedAt = issuedAt.toISOString();
  t.equal(first.bytes.toString('utf8'), canonicalJson(direct), 'the spliced bytes equal canonicalJson of the bundle');
  t.ok(verifyConfigBundle(first.bytes, first.signature, signingKey.publicKeyPem).ok);
  t.equal(publisher.knownLatest, first.version, 'reading the version takes note of it');

  t.equal(await publisher.bundleFor(node.id), first, 'the same version again comes from the cache');

  const next = await changeConfig(pool);
  const second = await publisher.bundleFor(node.id);
  t.equal(second?.version, next, 'a change makes a new bundle');
  const other = await enrolledNode(pool, settings);
  const forOther = await publisher.bundleFor(other.id);
  const parsed = forOther && verifyConfigBundle(forOther.bytes, forOther.signature, signingKey.publicKeyPem);
  t.equal(parsed && parsed.ok ? parsed.bundle.nodeId : undefined, other.id, "another node's bundle names that node");
});

t.test('a bundle for a deleted node is refused; the publisher answers undefined', async (t) => {
  const node = await enrolledNode(pool, settings);
  await deleteNode(pool, node.name);
  await t.rejects(buildNodeBundle(pool, node.id, harnessSecretBox), BundleBuildError);
  const publisher = new ConfigPublisher({ pool, secretBox: harnessSecretBox, signingKey });
  t.equal(await publisher.bundleFor(node.id), undefined);
});

t.test('stored rows that break the bundle schema stop the build with the path, never the values', async (t) => {
  // A throwaway database: the broken row must not spoil the other tests' bundles.
  const own = await testDatabase(t);
  const ownPool = await migratedPool(t, own.url);
  const node = await enrolledNode(ownPool, gatewaySettings(own.url));
  await ownPool.query('insert into guardrail_policies (name, rules) values ($1, $2)', ['broken', JSON.stringify([{ detector: 'telepathy', action: 'block', on: 'input' }])]);
  const err = await buildNodeBundle(ownPool, node.id, harnessSecretBox).catch((e: unknown) => e);
  t.type(err, BundleBuildError);
  t.match((err as Error).message, /guardrailPolicies\.0\.rules\.0\.detector/);
  t.notMatch((err as Error).message, /telepathy/, 'the stored value is not quoted');
});

t.test('a wrong ZENOVA_SECRET_ENC_KEY cannot open upstream secrets: the build fails, naming no secret', async (t) => {
  const seeded = await seedConfig(pool, harnessSecretBox);
  const node = await enrolledNode(pool, settings);
  const wrongBox = createSecretBox(randomBytes(32));
  const err = await buildNodeBundle(pool, node.id, wrongBox).catch((e: unknown) => e);
  t.type(err, SecretBoxError);
  t.equal((err as SecretBoxError).code, 'KEY_MISMATCH');
  t.notOk((err as Error).message.includes(seeded.upstreamSecret));
});

t.test('bundles asked for at the same moment are read in one snapshot transaction, not one each', async (t) => {
  // A change reaches every live session at once; one transaction per node starved the pool at fleet scale.
  await seedConfig(pool, harnessSecretBox);
  const nodes = await Promise.all(Array.from({ length: 20 }, () => enrolledNode(pool, settings)));
  let transactions = 0;
  const counting = Object.create(pool, {
    connect: { value: () => { transactions += 1; return pool.connect(); } },
  }) as typeof pool;
  const publisher = new ConfigPublisher({ pool: counting, secretBox: harnessSecretBox, signingKey });
  const bundles = await Promise.all(nodes.map((n) => publisher.bundleFor(n.id)));
  t.equal(transactions, 1, 'one transaction for 20 nodes');
  t.same(bundles.map((b) => b && verifyConfigBundle(b.bytes, b.signature, signingKey.publicKeyPem)).map((c) => c && c.ok && c.bundle.nodeId), nodes.map((n) => n.id),
    'each node got its own verified bundle');
  t.equal(new Set(bundles.map((b) => b?.version)).size, 1, 'all at one version');
});

t.test('a node whose cached bundle another node\'s signing evicts in the same batch still gets its bundle, not the "deleted" answer', async (t) => {
  await seedConfig(pool, harnessSecretBox);
  const a = await enrolledNode(pool, settings);
  const b = await enrolledNode(pool, settings);
  const size = (await new ConfigPublisher({ pool, secretBox: harnessSecretBox, signingKey }).bundleFor(a.id))!.bytes.byteLength;
  // A cache that holds one bundle.
  const publisher = new ConfigPublisher({ pool, secretBox: harnessSecretBox, signingKey, maxCachedBytes: size + 64 });
  const first = await publisher.bundleFor(a.id);
  t.ok(first, "A's bundle, cached");
  // B (its hello) and A (a reconnect) ask in one turn: one batch, B signed first, evicting A's.
  const [forB, forA] = await Promise.all([publisher.bundleFor(b.id), publisher.bundleFor(a.id)]);
  t.equal(forB?.version, first?.version);
  t.equal(forA?.version, first?.version, 'A is live: it gets its bundle (undefined would mean deleted, and nothing is pushed)');
});
