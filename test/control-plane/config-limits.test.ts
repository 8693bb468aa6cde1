/**
 * A change the admin API accepts must still fit in every node's config bundle: past a kind's cap or
 * the bundle's 8 MiB, it is refused (409 ZN_ERR_CP_CONFIG_LIMIT, naming the kind and the limit) and
 * changes nothing, so bundles keep building and later revocations still reach nodes. Revoking,
 * suspending and deleting are never refused. The size the check counts is the bundle's own, never less.
 *
 * The database is shared: each test fills what it needs with plain SQL and clears it at teardown.
 */
import t from 'tap';
import type { Test } from 'tap';
import { buildNodeBundle, encodeSignedBundle, inConfigSnapshot, readFleetConfig } from '../../control-plane/src/config/bundle-builder.js';
import { MAX_FLEET_BYTES, NODE_PART_BYTES, fleetFootprint } from '../../control-plane/src/config/config-limits.js';
import { ConfigPublisher, renderFleet } from '../../control-plane/src/config/config-publisher.js';
import { MAX_BUNDLE_ITEMS } from '../../proto/src/index.js';
import { testDatabase } from '../fixtures/postgres.js';
import { seedConfig } from './bundle-seed.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { enrolledNode, gatewaySettings, harnessSigningKey, migratedPool } from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call, secretBox, version } = await configApp(t, db.url);
const signingKey = await harnessSigningKey(pool);
const node = await enrolledNode(pool, gatewaySettings(db.url));

interface ErrorReply { error: { code: string; message: string; type: string } }

/** The signed bundle a node would be pushed now, through a fresh publisher (no cache). */
function bundleNow(): Promise<unknown> {
  return new ConfigPublisher({ pool, secretBox: secretBox!, signingKey }).bundleFor(node.id);
}

async function liveCount(table: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(`select count(*)::int as n from ${table} where deleted_at is null`);
  return rows[0]!.n;
}

function expectLimit(t: Test, res: { statusCode: number; json<T>(): T }, message: RegExp): void {
  t.equal(res.statusCode, 409, 'refused with 409');
  const { error } = res.json<ErrorReply>();
  t.equal(error.code, 'ZN_ERR_CP_CONFIG_LIMIT');
  t.equal(error.type, 'conflict_error');
  t.match(error.message, message, error.message);
}

t.test('a guardrail policy past the 1000 a bundle holds is refused, naming the kind and the limit, and bundles still build', async (t) => {
  const tag = uniqueConfigName('fill-g');
  t.teardown(() => pool.query("update guardrail_policies set deleted_at = now() where name like $1 || '%' and deleted_at is null", [tag]));
  await pool.query(
    "insert into guardrail_policies (name, rules) select $1 || '-' || i, '[]'::jsonb from generate_series(1, $2::int) as i",
    [tag, MAX_BUNDLE_ITEMS.guardrailPolicies - await liveCount('guardrail_policies')],
  );
  const before = await version();

  const refused = await call('POST', '/api/v1/guardrail-policies', { name: `${tag}-extra`, rules: [] });
  expectLimit(t, refused, /^guardrailPolicies: nodes take at most 1,000 guardrail policies, and this change would make 1,001/);
  t.equal(await version(), before, 'no config version recorded');
  t.equal(await liveCount('guardrail_policies'), MAX_BUNDLE_ITEMS.guardrailPolicies, 'nothing stored');
  await t.resolves(bundleNow(), 'every node still gets its bundle');

  expectStatus(await call('DELETE', `/api/v1/guardrail-policies/${tag}-1`), 200);
  expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: `${tag}-extra`, rules: [] }), 201);
  await t.resolves(bundleNow(), 'one deleted, one more fits');
});

t.test('a tool server past the 1000 a bundle holds is refused, while one that exists can still be replaced', async (t) => {
  const tag = `fill-ts-${process.pid % 1000}`;
  t.teardown(() => pool.query("update tool_servers set deleted_at = now() where name like $1 || '%' and deleted_at is null", [tag]));
  await pool.query(
    "insert into tool_servers (name, url) select $1 || '-' || i, 'http://127.0.0.1:9/mcp' from generate_series(1, $2::int) as i",
    [tag, MAX_BUNDLE_ITEMS.toolServers - await liveCount('tool_servers')],
  );

  const refused = await call('PUT', `/api/v1/tool-servers/${tag}-extra`, { url: 'http://127.0.0.1:9/mcp' });
  expectLimit(t, refused, /^toolServers: nodes take at most 1,000 tool servers, and this change would make 1,001/);
  t.equal(await liveCount('tool_servers'), MAX_BUNDLE_ITEMS.toolServers, 'nothing stored');
  expectStatus(await call('PUT', `/api/v1/tool-servers/${tag}-1`, { url: 'http://127.0.0.1:9/other' }), 200);
  await t.resolves(bundleNow(), 'every node still gets its bundle');
});

t.test('a route that would make nodes carry more than 1000 upstreams is refused; one naming an upstream already carried is not', async (t) => {
  const tag = uniqueConfigName('fill-up');
  t.teardown(async () => {
    await pool.query("update routes set deleted_at = now() where alias like $1 || '%' and deleted_at is null", [tag]);
    await pool.query("update upstreams set deleted_at = now() where name like $1 || '%' and deleted_at is null", [tag]);
  });
  const carried = (await fleetFootprint(pool)).kinds.upstreams.count;
  const room = MAX_BUNDLE_ITEMS.upstreams - carried;
  await pool.query(
    "insert into upstreams (name, kind, base_url) select $1 || '-' || i, 'openai', 'https://up.example/v1' from generate_series(1, $2::int + 1) as i",
    [tag, room],
  );
  await pool.query(
    `insert into routes (alias, targets)
     select $1 || '-' || i, jsonb_build_array(jsonb_build_object('upstream', $1 || '-' || i, 'model', 'm', 'weight', 1))
       from generate_series(1, $2::int) as i`,
    [tag, room],
  );
  // Every upstream but the last is named by a route; an upstream no route names costs nothing.
  expectStatus(await call('POST', '/api/v1/upstreams', { name: `${tag}-spare`, kind: 'openai', baseUrl: 'https://up.example/v1' }), 201);

  const refused = await call('POST', '/api/v1/routes', { alias: `${tag}-extra`, targets: [{ upstream: `${tag}-${room + 1}`, model: 'm' }] });
  expectLimit(t, refused, /^upstreams: nodes take at most 1,000 upstreams named by model routes, and this change would make 1,001/);
  expectStatus(await call('POST', '/api/v1/routes', { alias: `${tag}-extra`, targets: [{ upstream: `${tag}-1`, model: 'm' }] }), 201);
  await t.resolves(bundleNow(), 'every node still gets its bundle');
});

t.test('a change that would take the bundle past 8 MiB is refused, naming its size and largest part; the revocation after it reaches nodes', async (t) => {
  const tag = uniqueConfigName('fill-big');
  t.teardown(() => pool.query("update guardrail_policies set deleted_at = now() where name like $1 || '%' and deleted_at is null", [tag]));
  const account = uniqueConfigName('acct');
  expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
  const { apiKey } = expectStatus<{ apiKey: { id: string } }>(await call('POST', '/api/v1/api-keys', { account, name: 'k' }), 201);
  // Eight policies of ~1 MB each (10 000 keywords of 95 characters), every one within every per-policy rule.
  await pool.query(
    `insert into guardrail_policies (name, rules)
     select $1 || '-' || p, jsonb_build_array(jsonb_build_object('detector', 'keywords', 'action', 'flag', 'on', 'both',
              'keywords', (select jsonb_agg(rpad(p || '-' || i || '-', 95, 'x')) from generate_series(1, 10000) as i)))
       from generate_series(1, 8) as p`,
    [tag],
  );
  t.ok((await fleetFootprint(pool)).bytes < MAX_FLEET_BYTES, 'eight fit');
  await t.resolves(bundleNow(), 'and make a bundle');

  const keywords = Array.from({ length: 10_000 }, (_, i) => `9-${i}-`.padEnd(95, 'x'));
  const before = await version();
  const refused = await call('POST', '/api/v1/guardrail-policies', { name: `${tag}-9`, rules: [{ detector: 'keywords', keywords, action: 'flag', on: 'both' }] });
  expectLimit(t, refused, /^the config bundle nodes get would take up to [\d,]+ bytes, over the 8,384,512 it may hold .*largest: guardrail policies [\d,]+ bytes/);
  t.equal(await version(), before, 'no config version recorded');

  expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: `${tag}-small`, rules: [] }), 201);
  expectStatus(await call('POST', `/api/v1/api-keys/${apiKey.id}/revoke`), 200);
  const bundle = await buildNodeBundle(pool, node.id, secretBox!);
  t.equal(bundle.apiKeys.find((k) => k.id === apiKey.id)?.status, 'revoked', 'the revocation is in the bundle');
  await t.resolves(bundleNow(), 'which nodes are pushed');
});

t.test('past the limits (a config stored before they held), revoking, suspending and deleting go through; a change that grows is refused', async (t) => {
  const account = uniqueConfigName('acct');
  const tag = uniqueConfigName('fill-key');
  const { account: created } = expectStatus<{ account: { id: string } }>(await call('POST', '/api/v1/accounts', { name: account }), 201);
  const { apiKey } = expectStatus<{ apiKey: { id: string } }>(await call('POST', '/api/v1/api-keys', { account, name: 'k' }), 201);
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: `${tag}-rl`, requestsPerMinute: 60 }), 201);
  expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: `${tag}-g`, rules: [] }), 201);
  t.teardown(() => pool.query("delete from api_keys where name like $1 || '%'", [tag]));
  // Revoked keys stay in every bundle: 30 000 of them are over 8 MiB.
  await pool.query(
    `insert into api_keys (account_id, name, key_hash, key_prefix, status, revoked_at)
     select $1, $2 || '-' || i, sha256(convert_to($2 || '-' || i, 'UTF8')), 'zn_sk_fill__', 'revoked', now() from generate_series(1, 30000) as i`,
    [created.id, tag],
  );
  t.ok((await fleetFootprint(pool)).bytes > MAX_FLEET_BYTES, 'the config is past the budget');

  expectLimit(t, await call('POST', '/api/v1/api-keys', { account, name: 'more' }), /largest: API keys \(revoked ones included.*\) [\d,]+ bytes/);
  expectLimit(t, await call('PATCH', `/api/v1/accounts/${account}`, { rateLimitPolicy: `${tag}-rl` }), /^the config bundle nodes get would take/);
  expectStatus(await call('POST', `/api/v1/api-keys/${apiKey.id}/revoke`), 200);
  expectStatus(await call('PATCH', `/api/v1/accounts/${account}`, { status: 'suspended' }), 200);
  expectStatus(await call('DELETE', `/api/v1/guardrail-policies/${tag}-g`), 200);
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: `${tag}-rl2`, requestsPerMinute: 60 }), 201);
});

t.test('the size the check counts is the bundle\'s own for accounts, keys and prices, never less for the rest, and bounds the whole bundle', async (t) => {
  await seedConfig(pool, secretBox!);
  const tag = uniqueConfigName('size');
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: `${tag}-rl`, requestsPerMinute: 600, tokensPerMinute: 10_000_000_000 }), 201);
  expectStatus(await call('POST', '/api/v1/guardrail-policies', {
    name: `${tag}-g`,
    rules: [
      { detector: 'keywords', keywords: ['quote " and \\ backslash', 'line\nbreak\ttab', 'Ünïcødé 漢字 😀', '\u0001'], action: 'mask', on: 'both' },
      { detector: 'regex', pattern: '(?i)\\bsecret-[0-9]{3}\\b', action: 'block', on: 'input' },
    ],
  }), 201);
  expectStatus(await call('POST', '/api/v1/accounts', { name: `${tag}-a`, rateLimitPolicy: `${tag}-rl` }), 201);
  expectStatus(await call('POST', '/api/v1/accounts', { name: `${tag}-s`, status: 'suspended' }), 201);
  expectStatus(await call('POST', '/api/v1/upstreams', { name: `${tag}-up`, kind: 'anthropic', baseUrl: 'https://api.example/v1', apiKey: 'sk-"quoted"\\and\\escaped' }), 201);
  expectStatus(await call('POST', '/api/v1/upstreams', { name: `${tag}-up2`, kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1', timeoutMs: 600_000 }), 201);
  expectStatus(await call('POST', '/api/v1/upstreams', { name: `${tag}-up3`, kind: 'anthropic', baseUrl: 'http://127.0.0.1:9/v1', timeoutMs: 600_000 }), 201);
  // A route's upstreams are of one API family: the Anthropic ones here, the other in a route of its own.
  expectStatus(await call('POST', '/api/v1/routes', {
    alias: `${tag}-r`, targets: [{ upstream: `${tag}-up`, model: 'claude-x', weight: 1000 }, { upstream: `${tag}-up3`, model: 'm', weight: 0 }],
    fallbacks: [{ upstream: `${tag}-up3`, model: 'f' }], timeoutMs: 100, retries: 5,
  }), 201);
  expectStatus(await call('POST', '/api/v1/routes', { alias: `${tag}-r2`, targets: [{ upstream: `${tag}-up2`, model: 'm' }] }), 201);
  const { apiKey } = expectStatus<{ apiKey: { id: string } }>(await call('POST', '/api/v1/api-keys', {
    account: `${tag}-a`, name: 'full', allowedModels: [`${tag}-r`, 'other/alias'], expiresAt: '2999-01-01T00:00:00+05:00',
    rateLimitPolicy: `${tag}-rl`, guardrailPolicy: `${tag}-g`,
  }), 201);
  expectStatus(await call('POST', '/api/v1/api-keys', { account: `${tag}-a`, name: 'none', allowedModels: [] }), 201);
  // allowedToolServers is left out of a key's entry when null, and counted only when set.
  expectStatus(await call('POST', '/api/v1/api-keys', { account: `${tag}-a`, name: 'tools', allowedToolServers: ['crm-lookup', 'mail-send'] }), 201);
  expectStatus(await call('POST', '/api/v1/api-keys', { account: `${tag}-a`, name: 'no-tools', allowedToolServers: [] }), 201);
  expectStatus(await call('POST', `/api/v1/api-keys/${apiKey.id}/revoke`), 200);
  expectStatus(await call('PUT', `/api/v1/prices/${tag}-r`, { inputMicrosPerToken: 0, outputMicrosPerToken: Number.MAX_SAFE_INTEGER, requestMicros: 12 }), 200);
  expectStatus(await call('PUT', `/api/v1/tool-servers/size-ts-${process.pid % 1000}`, { url: 'https://tools.example/mcp', apiKey: 'tool-\\"key"', callMicros: 7 }), 201);
  expectStatus(await call('PUT', `/api/v1/tool-servers/size-ts2-${process.pid % 1000}`, { url: 'http://127.0.0.1:9/mcp' }), 201);

  const { parts, footprint } = await inConfigSnapshot(pool, async (client) => {
    const fleet = await readFleetConfig(client, secretBox!);
    // The check counts every key as revoked and every account as suspended: compare like with like.
    const worst = {
      ...fleet,
      accounts: fleet.accounts.map((a) => ({ ...a, status: 'suspended' as const })),
      apiKeys: fleet.apiKeys.map((k) => ({ ...k, status: 'revoked' as const })),
    };
    return { parts: renderFleet(1, worst).parts, footprint: await fleetFootprint(client) };
  });
  for (const kind of ['accounts', 'apiKeys', 'prices'] as const) {
    t.equal(footprint.kinds[kind].bytes, parts[kind].byteLength, `${kind}: exactly the bundle's bytes`);
  }
  for (const kind of ['upstreams', 'routes', 'guardrailPolicies', 'toolServers'] as const) {
    t.ok(footprint.kinds[kind].bytes >= parts[kind].byteLength, `${kind}: ${footprint.kinds[kind].bytes} counted, ${parts[kind].byteLength} in the bundle`);
  }
  const signed = encodeSignedBundle(await buildNodeBundle(pool, node.id, secretBox!), signingKey);
  t.ok(signed.bytes.byteLength <= footprint.bytes + NODE_PART_BYTES, `the bundle (${signed.bytes.byteLength} bytes) is within what was counted plus the node's part`);
  t.ok(footprint.bytes - Object.values(parts).reduce((n, p) => n + p.byteLength, 0) < 2048, 'and the count is close to it');
});
