/**
 * A config already past a bundle limit (stored before the limits were enforced) still takes the
 * edits that do not make it worse: an operator can remove a leaked provider key, shorten a timeout,
 * drop a route target or lower a price. Only a change that takes a kind's count, or the bundle's
 * bytes, further past the limit is refused, and the refusal names what the change grew.
 *
 * The database is shared: each test fills what it needs with plain SQL and clears it at teardown.
 */
import t from 'tap';
import type { Test } from 'tap';
import { MAX_FLEET_BYTES, fleetFootprint } from '../../control-plane/src/config/config-limits.js';
import { MAX_BUNDLE_ITEMS } from '../../proto/src/index.js';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { migratedPool } from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call, version } = await configApp(t, db.url);

interface ErrorReply { error: { code: string; message: string } }

function expectLimit(t: Test, res: { statusCode: number; json<T>(): T }, message: RegExp): void {
  t.equal(res.statusCode, 409, 'refused with 409');
  const { error } = res.json<ErrorReply>();
  t.equal(error.code, 'ZN_ERR_CP_CONFIG_LIMIT');
  t.match(error.message, message, error.message);
}

async function hasSecret(table: 'upstreams' | 'tool_servers', name: string): Promise<boolean> {
  const { rows } = await pool.query<{ sealed: boolean }>(`select secret_encrypted is not null as sealed from ${table} where name = $1 and deleted_at is null`, [name]);
  return rows[0]!.sealed;
}

/** Upstreams with keys, a two-target route naming them, a tool server with a key, and a price. */
async function configWithSecrets(tag: string): Promise<void> {
  expectStatus(await call('POST', '/api/v1/upstreams', { name: `${tag}-u1`, kind: 'openai', baseUrl: 'https://up.example/v1', apiKey: 'sk-leaked-0123456789', timeoutMs: 60_000 }), 201);
  expectStatus(await call('POST', '/api/v1/upstreams', { name: `${tag}-u2`, kind: 'openai', baseUrl: 'https://up2.example/v1' }), 201);
  expectStatus(await call('POST', '/api/v1/routes', {
    alias: `${tag}-r`, targets: [{ upstream: `${tag}-u1`, model: 'm' }, { upstream: `${tag}-u2`, model: 'm' }],
  }), 201);
  expectStatus(await call('PUT', `/api/v1/tool-servers/${tag}-ts`, { url: 'https://tools.example/mcp', apiKey: 'tool-leaked-0123456789' }), 201);
  expectStatus(await call('PUT', `/api/v1/prices/${tag}-r`, { inputMicrosPerToken: 100, outputMicrosPerToken: 200 }), 200);
}

t.test('past the guardrail-policy count, edits that shrink the config go through and only one adding a policy is refused', async (t) => {
  const tag = uniqueConfigName('shrink-n');
  await configWithSecrets(tag);
  t.teardown(() => pool.query("update guardrail_policies set deleted_at = now() where name like $1 || '%' and deleted_at is null", [tag]));
  await pool.query(
    "insert into guardrail_policies (name, rules) select $1 || '-legacy-' || i, '[]'::jsonb from generate_series(1, $2::int) as i",
    [tag, MAX_BUNDLE_ITEMS.guardrailPolicies + 1],
  );
  t.equal((await fleetFootprint(pool)).kinds.guardrailPolicies.count, 1001, 'the config is past the guardrail-policy limit');

  const before = await version();
  expectStatus(await call('PATCH', `/api/v1/upstreams/${tag}-u1`, { apiKey: null }), 200);
  t.notOk(await hasSecret('upstreams', `${tag}-u1`), 'the leaked upstream key is gone');
  expectStatus(await call('PUT', `/api/v1/tool-servers/${tag}-ts`, { url: 'https://tools.example/mcp', apiKey: null }), 200);
  t.notOk(await hasSecret('tool_servers', `${tag}-ts`), 'the leaked tool-server key is gone');
  expectStatus(await call('PATCH', `/api/v1/upstreams/${tag}-u1`, { timeoutMs: 5000 }), 200);
  expectStatus(await call('PUT', `/api/v1/routes/${tag}-r`, { targets: [{ upstream: `${tag}-u1`, model: 'm' }] }), 200);
  expectStatus(await call('PUT', `/api/v1/prices/${tag}-r`, { inputMicrosPerToken: 10, outputMicrosPerToken: 20 }), 200);
  t.equal(await version(), before + 5, 'each edit recorded a config version');

  // Larger, but adding no guardrail policy and within the bytes: not refused in the guardrail policies' name.
  expectStatus(await call('PATCH', `/api/v1/upstreams/${tag}-u1`, { apiKey: 'sk-rotated-0123456789' }), 200);
  const refused = await call('POST', '/api/v1/guardrail-policies', { name: `${tag}-one-more`, rules: [] });
  expectLimit(t, refused, /^guardrailPolicies: nodes take at most 1,000 guardrail policies, and this change would make 1,002 \(there are 1,001 now\); delete some first\.$/);
});

t.test('past the bundle bytes, removing a leaked key goes through and adding one is refused, naming the part it grew', async (t) => {
  const tag = uniqueConfigName('shrink-b');
  await configWithSecrets(tag);
  const { account } = expectStatus<{ account: { id: string } }>(await call('POST', '/api/v1/accounts', { name: `${tag}-a` }), 201);
  t.teardown(() => pool.query("delete from api_keys where name like $1 || '%'", [tag]));
  // Revoked keys stay in every bundle: 30 000 of them are over 8 MiB.
  await pool.query(
    `insert into api_keys (account_id, name, key_hash, key_prefix, status, revoked_at)
     select $1, $2 || '-' || i, sha256(convert_to($2 || '-' || i, 'UTF8')), 'zn_sk_fill__', 'revoked', now() from generate_series(1, 30000) as i`,
    [account.id, tag],
  );
  t.ok((await fleetFootprint(pool)).bytes > MAX_FLEET_BYTES, 'the config is past the bundle bytes');

  expectStatus(await call('PATCH', `/api/v1/upstreams/${tag}-u1`, { apiKey: null }), 200);
  t.notOk(await hasSecret('upstreams', `${tag}-u1`), 'the leaked upstream key is gone');
  expectStatus(await call('PUT', `/api/v1/tool-servers/${tag}-ts`, { url: 'https://tools.example/mcp', apiKey: null }), 200);
  expectStatus(await call('PUT', `/api/v1/routes/${tag}-r`, { targets: [{ upstream: `${tag}-u1`, model: 'm' }] }), 200);
  expectStatus(await call('PUT', `/api/v1/prices/${tag}-r`, { inputMicrosPerToken: 10, outputMicrosPerToken: 20 }), 200);

  const before = await version();
  const refused = await call('PATCH', `/api/v1/upstreams/${tag}-u1`, { apiKey: 'sk-rotated-0123456789' });
  expectLimit(t, refused, /^the config bundle nodes get would take up to [\d,]+ bytes, over the 8,384,512 it may hold .*This change adds [\d,]+ bytes \(to upstreams named by model routes\)\./);
  t.equal(await version(), before, 'no config version recorded');
  t.notOk(await hasSecret('upstreams', `${tag}-u1`), 'nothing stored');
});
