// The config lists that can grow past what one answer should carry (a config may hold a million
// API keys and 100 000 accounts) come in keyset pages: walking /api-keys and /accounts reaches every
// row exactly once in the documented order, a page reads an index range rather than sorting the
// table, and a cursor the API did not issue is a 400.
import t from 'tap';
import { listApiKeysQuery } from '../../control-plane/src/keys/api-key-store.js';
import { indexOnlyPlan } from '../fixtures/index-plan.js';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName, walkPages } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call } = await configApp(t, db.url);

interface KeyPage { apiKeys: Array<{ id: string; name: string; account: string; createdAt: string }>; nextCursor: string | null }
interface AccountPage { accounts: Array<{ name: string }>; nextCursor: string | null }

const walk = <P extends { nextCursor: string | null }>(url: string): Promise<P[]> => walkPages<P>(call, url);

const account = uniqueConfigName('paged');
const other = uniqueConfigName('paged');
for (const name of [account, other]) expectStatus(await call('POST', '/api/v1/accounts', { name }), 201);
const created: string[] = [];
for (let i = 0; i < 7; i++) {
  created.push(expectStatus<{ apiKey: { id: string } }>(await call('POST', '/api/v1/api-keys', { account, name: `k${i}` }), 201).apiKey.id);
}
expectStatus(await call('POST', '/api/v1/api-keys', { account: other, name: 'elsewhere' }), 201);
// Two keys with one created_at: the id orders them, and a page boundary between them loses neither.
await pool.query("update api_keys set created_at = (select created_at from api_keys where id = $1) where id = $2", [created[3], created[4]]);

t.test("an account's keys walked three at a time come newest first, each once, and the last page says so", async (t) => {
  const pages = await walk<KeyPage>(`/api/v1/api-keys?account=${account}&limit=3`);
  t.same(pages.map((p) => p.apiKeys.length), [3, 3, 1]);
  t.equal(pages.at(-1)!.nextCursor, null);
  const keys = pages.flatMap((p) => p.apiKeys);
  t.same(new Set(keys.map((k) => k.id)), new Set(created), 'every key of the account, once');
  t.ok(keys.every((k) => k.account === account), 'only that account\'s');
  const { rows } = await pool.query<{ id: string }>('select id from api_keys where account_id = (select id from accounts where name = $1) order by created_at desc, id desc', [account]);
  t.same(keys.map((k) => k.id), rows.map((r) => r.id), 'in (created_at, id) descending order');
});

t.test('all keys walked two at a time reach every key once, with a page of the default size holding them all', async (t) => {
  const paged = (await walk<KeyPage>('/api/v1/api-keys?limit=2')).flatMap((p) => p.apiKeys.map((k) => k.id));
  t.equal(new Set(paged).size, paged.length, 'none twice');
  const whole = expectStatus<KeyPage>(await call('GET', '/api/v1/api-keys'), 200);
  t.equal(whole.nextCursor, null, 'fewer than the default 1000');
  t.same(paged, whole.apiKeys.map((k) => k.id));
});

t.test('a key created while a list is walked is not listed twice, nor does it move the others', async (t) => {
  const first = expectStatus<KeyPage>(await call('GET', `/api/v1/api-keys?account=${account}&limit=4`), 200);
  const added = expectStatus<{ apiKey: { id: string } }>(await call('POST', '/api/v1/api-keys', { account, name: 'late' }), 201).apiKey.id;
  const rest = (await walk<KeyPage>(`/api/v1/api-keys?account=${account}&limit=4&cursor=${encodeURIComponent(first.nextCursor!)}`)).flatMap((p) => p.apiKeys);
  t.same(new Set([...first.apiKeys, ...rest].map((k) => k.id)), new Set(created), 'the keys there when the walk began, once each');
  t.notOk(rest.some((k) => k.id === added), 'the newer key is before the cursor: the next walk lists it first');
  t.equal(expectStatus<KeyPage>(await call('GET', `/api/v1/api-keys?account=${account}&limit=1`), 200).apiKeys[0]!.id, added);
});

t.test('accounts walked two at a time come by name, each once', async (t) => {
  const names = (await walk<AccountPage>('/api/v1/accounts?limit=2')).flatMap((p) => p.accounts.map((a) => a.name));
  t.equal(new Set(names).size, names.length, 'none twice');
  t.ok(names.includes(account) && names.includes(other));
  const { rows } = await pool.query<{ name: string }>('select name from accounts where deleted_at is null order by name');
  t.same(names, rows.map((r) => r.name), 'in the order of their names');
  t.equal(expectStatus<AccountPage>(await call('GET', '/api/v1/accounts'), 200).nextCursor, null);
});

t.test('a cursor the API did not issue, or from the other list, and a limit out of range are 400s naming the field', async (t) => {
  const keyCursor = expectStatus<KeyPage>(await call('GET', '/api/v1/api-keys?limit=1'), 200).nextCursor!;
  const accountCursor = expectStatus<AccountPage>(await call('GET', '/api/v1/accounts?limit=1'), 200).nextCursor!;
  for (const [url, words] of [
    [`/api/v1/api-keys?cursor=${encodeURIComponent(accountCursor)}`, 'cursor: not a cursor this API returned'],
    [`/api/v1/api-keys?cursor=${encodeURIComponent(`0${keyCursor}`)}`, 'cursor: not a cursor this API returned'],
    ['/api/v1/api-keys?cursor=1.00000000-0000-4000-8000-00000000000G', 'cursor: not a cursor this API returned'],
    [`/api/v1/accounts?cursor=${encodeURIComponent(keyCursor)}`, 'cursor: not a cursor this API returned'],
    [`/api/v1/accounts?cursor=${Buffer.from('no spaces').toString('base64url')}`, 'cursor: not a cursor this API returned'],
    [`/api/v1/accounts?cursor=${accountCursor}=`, 'cursor: not a cursor this API returned'],
    ['/api/v1/api-keys?limit=0', "query field 'limit': must be a whole number from 1 to 10000"],
    ['/api/v1/api-keys?limit=10001', "query field 'limit': must be a whole number from 1 to 10000"],
    ['/api/v1/accounts?limit=10001', "query field 'limit': must be a whole number from 1 to 10000"],
    ['/api/v1/accounts?page=2', 'page'],
  ] as const) {
    const res = await call('GET', url);
    t.equal(res.statusCode, 400, url);
    t.match(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: new RegExp(words.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')) } }, url);
  }
});

t.test('every key list page reads an index in (created_at, id) order from its cursor, without sorting the keys whole', async (t) => {
  const { rows } = await pool.query<{ id: string }>('select id from accounts where name = $1', [account]);
  const cursor = { createdAtUs: 1767225600000000n, id: '00000000-0000-4000-8000-000000000000' };
  for (const [filter, index] of [
    [{}, 'api_keys_created_idx'],
    [{ cursor }, 'api_keys_created_idx'],
    [{ accountId: rows[0]!.id, cursor }, 'api_keys_account_created_idx'],
  ] as const) {
    const text = await indexOnlyPlan(pool, listApiKeysQuery({ ...filter, limit: 50 }));
    t.match(text, new RegExp(`Index Scan using ${index}`), `${JSON.stringify(Object.keys(filter))}: ${text}`);
    t.notMatch(text, /\bSort\b/, 'no sort of the keys');
    if ('cursor' in filter) t.match(text, /Index Cond: .*created_at/, `the cursor bounds the index range: ${text}`);
  }
});
