/**
 * An API key past its expiresAt is shown as `expired` (revoked still wins), holds no policy (keys
 * cannot be edited, so a policy only an expired key names could otherwise never be deleted) and
 * gets its account no credit leases. Expiry is set in the past directly in the database, as time
 * passing would: no test waits for a key to expire.
 */
import t from 'tap';
import { accountsToLease } from '../../control-plane/src/billing/credit-leases.js';
import { testDatabase } from '../fixtures/postgres.js';
import { insertAccount, insertNode } from './billing/billing-fixtures.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call } = await configApp(t, db.url);
const account = uniqueConfigName('acct');
expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);

interface KeyView { id: string; status: string }
const inAnHour = (): string => new Date(Date.now() + 3_600_000).toISOString();

async function createKey(body: Record<string, unknown> = {}): Promise<string> {
  const created = expectStatus<{ apiKey: KeyView }>(await call('POST', '/api/v1/api-keys', { account, name: 'k', expiresAt: inAnHour(), ...body }), 201);
  return created.apiKey.id;
}

async function expire(id: string): Promise<void> {
  await pool.query(`update api_keys set expires_at = now() - interval '1 second' where id = $1`, [id]);
}

async function statusOf(id: string): Promise<{ get: string; list: string | undefined }> {
  const get = expectStatus<KeyView>(await call('GET', `/api/v1/api-keys/${id}`), 200);
  const list = expectStatus<{ apiKeys: KeyView[] }>(await call('GET', `/api/v1/api-keys?account=${account}`), 200);
  return { get: get.status, list: list.apiKeys.find((k) => k.id === id)?.status };
}

t.test('a key past its expiresAt is shown as expired in the list and on its own; one before it as active', async (t) => {
  const id = await createKey();
  t.same(await statusOf(id), { get: 'active', list: 'active' });
  await expire(id);
  t.same(await statusOf(id), { get: 'expired', list: 'expired' });
});

t.test('a revoked key is shown as revoked, expired or not', async (t) => {
  const id = await createKey();
  await expire(id);
  const revoked = expectStatus<{ apiKey: KeyView }>(await call('POST', `/api/v1/api-keys/${id}/revoke`), 200);
  t.equal(revoked.apiKey.status, 'revoked');
  t.same(await statusOf(id), { get: 'revoked', list: 'revoked' });
});

t.test('a rate-limit policy only an expired key names can be deleted', async (t) => {
  const policy = uniqueConfigName('rl');
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: policy, requestsPerMinute: 5 }), 201);
  const id = await createKey({ rateLimitPolicy: policy });
  await expire(id);
  const deleted = await call('DELETE', `/api/v1/rate-limit-policies/${policy}`);
  t.equal(deleted.statusCode, 200, deleted.body);
});

t.test('a guardrail policy only an expired key names can be deleted', async (t) => {
  const policy = uniqueConfigName('gr');
  expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: policy, rules: [] }), 201);
  const id = await createKey({ guardrailPolicy: policy });
  await expire(id);
  const deleted = await call('DELETE', `/api/v1/guardrail-policies/${policy}`);
  t.equal(deleted.statusCode, 200, deleted.body);
});

t.test('a rate-limit policy an active key names is refused with what to do: revoke the key', async (t) => {
  const policy = uniqueConfigName('rl');
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: policy, requestsPerMinute: 5 }), 201);
  await createKey({ rateLimitPolicy: policy });
  const refused = await call('DELETE', `/api/v1/rate-limit-policies/${policy}`);
  t.equal(refused.statusCode, 409, refused.body);
  t.match(refused.json(), { error: { code: 'ZN_ERR_CP_POLICY_IN_USE', message: /1 active API key\(s\).*revoke the keys/ } });
});

t.test('an account whose only key has expired is offered no credit lease', async (t) => {
  const accountId = await insertAccount(pool);
  const nodeId = await insertNode(pool);
  await pool.query('insert into account_balances (account_id, balance_micros) values ($1, 1000)', [accountId]);
  t.ok((await accountsToLease(pool, nodeId, Date.now(), 3_600_000)).includes(accountId), 'offered while its key is valid');
  await pool.query(`update api_keys set expires_at = now() - interval '1 second' where account_id = $1`, [accountId]);
  t.notOk((await accountsToLease(pool, nodeId, Date.now(), 3_600_000)).includes(accountId), 'not offered once it has expired');
});
