// Every admin route refuses a query parameter it does not take, not only the lists: a top-up's
// `reference` put in the URL instead of the body was ignored, so the retry of a timed-out top-up
// credited the account a second time, and `POST /accounts?dryRun=true` created the account. A
// query with a malformed %-escape is refused too, as such a path is.
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { call } = await configApp(t, db.url);

interface ErrorReply { error: { code: string; message: string } }
interface Balance { balance: { balanceMicros: number } }

t.test('a top-up with its reference in the query is refused, so a retry cannot credit twice', async (t) => {
  expectStatus(await call('POST', '/api/v1/accounts', { name: 'acme' }), 201);
  for (let i = 0; i < 2; i += 1) {
    const res = await call('POST', '/api/v1/accounts/acme/credits?reference=inv-7', { amountMicros: 1000 });
    t.equal(res.statusCode, 400);
    const body = res.json<ErrorReply>();
    t.equal(body.error.code, 'ZN_ERR_CP_INVALID_REQUEST');
    t.match(body.error.message, /query: Unrecognized key: "reference"/);
  }
  const balance = (await call('GET', '/api/v1/accounts/acme/balance')).json<Balance>();
  t.equal(Number(balance.balance.balanceMicros), 0, 'nothing credited');
  // The reference in the body is what makes a top-up idempotent.
  expectStatus(await call('POST', '/api/v1/accounts/acme/credits', { amountMicros: 1000, reference: 'inv-7' }), 201);
  expectStatus(await call('POST', '/api/v1/accounts/acme/credits', { amountMicros: 1000, reference: 'inv-7' }), 200);
  t.equal(Number((await call('GET', '/api/v1/accounts/acme/balance')).json<Balance>().balance.balanceMicros), 1000);
});

t.test('a create, an update, a delete and a read with a query parameter they do not take are refused and change nothing', async (t) => {
  const created = await call('POST', '/api/v1/accounts?dryRun=true', { name: 'tried' });
  t.equal(created.statusCode, 400);
  t.equal((await call('GET', '/api/v1/accounts/tried')).statusCode, 404, 'not created');
  expectStatus(await call('POST', '/api/v1/accounts', { name: 'kept' }), 201);
  t.equal((await call('PATCH', '/api/v1/accounts/kept?x=1', { status: 'suspended' })).statusCode, 400);
  t.match((await call('GET', '/api/v1/accounts/kept')).json(), { status: 'active' }, 'not changed');
  t.equal((await call('DELETE', '/api/v1/prices/nope?force=1')).statusCode, 400);
  for (const path of ['/api/v1/whoami?x=1', '/api/v1/accounts/kept?x=1', '/api/v1/config/version?x=1']) {
    const res = await call('GET', path);
    t.equal(res.statusCode, 400, path);
    t.equal(res.json<ErrorReply>().error.code, 'ZN_ERR_CP_INVALID_REQUEST', path);
  }
  // Without the stray parameter the same calls are answered.
  expectStatus(await call('GET', '/api/v1/whoami'), 200);
  expectStatus(await call('GET', '/api/v1/config/version'), 200);
});

t.test('a query value with a malformed %-escape is refused as one in the path is, not searched for as written', async (t) => {
  for (const query of ['keyId=%E0%A4%A', 'keyId=%', 'keyId=%ZZ', 'status=ok&keyId=%C3']) {
    const res = await call('GET', `/api/v1/requests?${query}`);
    t.equal(res.statusCode, 400, query);
    t.equal(res.json<ErrorReply>().error.code, 'ZN_ERR_CP_INVALID_REQUEST', query);
    t.match(res.json<ErrorReply>().error.message, /The URL query cannot be decoded/, query);
  }
  // Well-formed escapes, UTF-8 included, are read as before.
  expectStatus(await call('GET', `/api/v1/requests?keyId=${encodeURIComponent('ключ-1')}`), 200);
  expectStatus(await call('GET', '/api/v1/requests?keyId=a%2Bb'), 200);
});
