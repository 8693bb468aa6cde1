/**
 * The accounts routes (`GET`/`PATCH /api/v1/accounts/{account}`) and the key list's `?account=`
 * take an account's name or its id, a name first, as the billing routes and `/requests?account=`
 * do (billing-views.ts findAccount): an id copied from a balance, a lease or a record reaches its
 * account everywhere, in either case, and a name still wins over another account's id.
 */
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call } = await configApp(t, db.url);

interface AccountView { id: string; name: string; status: string }

const acme = expectStatus<{ account: AccountView }>(await call('POST', '/api/v1/accounts', { name: uniqueConfigName('acme-by-id') }), 201).account;
const key = expectStatus<{ apiKey: { id: string } }>(await call('POST', '/api/v1/api-keys', { account: acme.name, name: 'k' }), 201).apiKey;
const unknownId = '00000000-0000-4000-8000-000000000000';

t.test('GET /api/v1/accounts/{id} shows the account, as by its name', async (t) => {
  const byName = expectStatus<AccountView>(await call('GET', `/api/v1/accounts/${acme.name}`), 200);
  t.same(expectStatus<AccountView>(await call('GET', `/api/v1/accounts/${acme.id}`), 200), byName);
  t.same(expectStatus<AccountView>(await call('GET', `/api/v1/accounts/${acme.id.toUpperCase()}`), 200), byName, 'the id in upper case too');

  const missing = await call('GET', `/api/v1/accounts/${unknownId}`);
  t.equal(missing.statusCode, 404);
  t.equal(missing.json<{ error: { code: string; message: string } }>().error.code, 'ZN_ERR_CP_ACCOUNT_NOT_FOUND');
  t.equal(missing.json<{ error: { message: string } }>().error.message, `No account named or with id '${unknownId}'.`);
});

t.test('PATCH /api/v1/accounts/{id} changes the account', async (t) => {
  const patched = expectStatus<{ account: AccountView }>(await call('PATCH', `/api/v1/accounts/${acme.id}`, { status: 'suspended' }), 200).account;
  t.same([patched.id, patched.name, patched.status], [acme.id, acme.name, 'suspended']);
  t.equal(expectStatus<AccountView>(await call('GET', `/api/v1/accounts/${acme.name}`), 200).status, 'suspended', 'stored');
  expectStatus(await call('PATCH', `/api/v1/accounts/${acme.id}`, { status: 'active' }), 200);

  const missing = await call('PATCH', `/api/v1/accounts/${unknownId}`, { status: 'suspended' });
  t.equal(missing.statusCode, 404);
  t.equal(missing.json<{ error: { code: string } }>().error.code, 'ZN_ERR_CP_ACCOUNT_NOT_FOUND');
});

t.test('GET /api/v1/api-keys?account={id} lists that account\'s keys', async (t) => {
  const byName = expectStatus<{ apiKeys: Array<{ id: string }> }>(await call('GET', `/api/v1/api-keys?account=${acme.name}`), 200).apiKeys;
  const byId = expectStatus<{ apiKeys: Array<{ id: string }> }>(await call('GET', `/api/v1/api-keys?account=${acme.id}`), 200).apiKeys;
  t.same(byId.map((k) => k.id), [key.id]);
  t.same(byId, byName);

  const missing = await call('GET', `/api/v1/api-keys?account=${unknownId}`);
  t.equal(missing.statusCode, 404);
  t.equal(missing.json<{ error: { code: string; message: string } }>().error.message, `No account named or with id '${unknownId}'.`);
});

t.test("a name is looked up first: an account named (before the rule) with another's id is the one shown", async (t) => {
  await pool.query('insert into accounts (name) values ($1)', [acme.id]);
  const shown = expectStatus<AccountView>(await call('GET', `/api/v1/accounts/${acme.id}`), 200);
  t.equal(shown.name, acme.id, 'the account of that name');
  t.not(shown.id, acme.id);
  t.same(expectStatus<{ apiKeys: unknown[] }>(await call('GET', `/api/v1/api-keys?account=${acme.id}`), 200).apiKeys, [], 'its keys: none');
});
