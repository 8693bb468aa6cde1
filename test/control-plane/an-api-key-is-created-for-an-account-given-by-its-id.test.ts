/**
 * `POST /api/v1/api-keys` takes the account's name or its id, a name first, as every other
 * account-addressed route does (`GET /api-keys?account=`, billing-views.ts findAccount): a key is
 * created for the account an id names, in either case; an id of no account is refused as an
 * unknown name is (400 `account: no account named or with id …`), nothing created. findAccount compares an id as a uuid,
 * so its lookup uses an index (the live-name index, the primary key), never a scan of accounts (every scan in its plans has an index condition).
 */
import t from 'tap';
import type pg from 'pg';
import { findAccount } from '../../control-plane/src/billing/billing-views.js';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call } = await configApp(t, db.url);

interface AccountView { id: string; name: string }
interface ApiKeyView { id: string; account: string; name: string }
interface ErrorBody { error: { code: string; message: string; param: string | null } }

const acme = expectStatus<{ account: AccountView }>(await call('POST', '/api/v1/accounts', { name: uniqueConfigName('acme-key-by-id') }), 201).account;
const unknownId = '00000000-0000-4000-8000-000000000000';

async function keysOf(account: string): Promise<string[]> {
  return expectStatus<{ apiKeys: ApiKeyView[] }>(await call('GET', `/api/v1/api-keys?account=${account}`), 200).apiKeys.map((k) => k.name);
}

t.test('a key is created for the account given by its id, as by its name', async (t) => {
  const byId = expectStatus<{ apiKey: ApiKeyView; secret: string }>(await call('POST', '/api/v1/api-keys', { account: acme.id, name: 'by-id' }), 201);
  t.equal(byId.apiKey.account, acme.name, 'the key is that account\'s');
  t.ok(byId.secret.length > 0, 'its secret is in the answer');
  const upper = expectStatus<{ apiKey: ApiKeyView }>(await call('POST', '/api/v1/api-keys', { account: acme.id.toUpperCase(), name: 'by-upper-id' }), 201);
  t.equal(upper.apiKey.account, acme.name, 'the id in upper case too');
  expectStatus(await call('POST', '/api/v1/api-keys', { account: acme.name, name: 'by-name' }), 201);
  t.same((await keysOf(acme.id)).sort(), ['by-id', 'by-name', 'by-upper-id']);
});

t.test('an id of no account is refused as an unknown name is, nothing created', async (t) => {
  const before = await pool.query<{ n: string }>('select count(*)::text as n from api_keys');
  const name = await call('POST', '/api/v1/api-keys', { account: 'no-such-account', name: 'k' });
  const id = await call('POST', '/api/v1/api-keys', { account: unknownId, name: 'k' });
  t.equal(id.statusCode, name.statusCode, `the same status (${name.statusCode})`);
  t.equal(id.json<ErrorBody>().error.code, name.json<ErrorBody>().error.code, 'the same code');
  t.equal(id.json<ErrorBody>().error.param, name.json<ErrorBody>().error.param, 'the same param');
  t.equal(id.json<ErrorBody>().error.message, `account: no account named or with id '${unknownId}'`);
  t.equal(name.json<ErrorBody>().error.message, "account: no account named 'no-such-account'", 'an unknown name as before');
  t.same((await pool.query<{ n: string }>('select count(*)::text as n from api_keys')).rows, before.rows, 'no key created');
});

t.test('a deleted account\'s id creates no key', async (t) => {
  const gone = expectStatus<{ account: AccountView }>(await call('POST', '/api/v1/accounts', { name: uniqueConfigName('gone-key-by-id') }), 201).account;
  await pool.query('update accounts set deleted_at = now() where id = $1', [gone.id]);
  const refused = await call('POST', '/api/v1/api-keys', { account: gone.id, name: 'k' });
  t.equal(refused.statusCode, 400);
  t.equal(refused.json<ErrorBody>().error.message, `account: no account named or with id '${gone.id}'`);
});

interface PlanNode { 'Node Type': string; 'Index Name'?: string; 'Index Cond'?: string; Plans?: PlanNode[] }
const nodesOf = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodesOf)];

t.test('findAccount finds by name or id through an index, never a scan of accounts', async (t) => {
  const client = await pool.connect();
  t.teardown(() => client.release());
  const seen: Array<{ text: string; values: unknown[] }> = [];
  const query = client.query.bind(client) as (text: string, values?: unknown[]) => Promise<pg.QueryResult>;
  const spy = Object.create(client) as pg.PoolClient;
  (spy as unknown as { query: typeof query }).query = async (text, values = []) => {
    seen.push({ text, values });
    return query(text, values);
  };
  t.same(await findAccount(spy, acme.id), { id: acme.id, name: acme.name }, 'by id');
  t.same(await findAccount(spy, acme.name), { id: acme.id, name: acme.name }, 'by name');
  t.equal(await findAccount(spy, unknownId), undefined, 'an id of no account');
  t.equal(seen.length, 3);
  await query('begin');
  try {
    // With a scan made as dear as it can be, a query that could use an index does.
    await query('set local enable_seqscan = off');
    for (const { text, values } of seen) {
      const [{ Plan: plan }] = (await query(`explain (format json) ${text}`, values)).rows[0]!['QUERY PLAN'] as [{ Plan: PlanNode }];
      // No sequential scan, and every index scan with a condition (not a walk of a whole index).
      const nodes = nodesOf(plan);
      t.notOk(nodes.some((n) => n['Node Type'] === 'Seq Scan'), `${JSON.stringify(values[0])}: no sequential scan`);
      const scans = nodes.filter((n) => /Index/.test(n['Node Type']));
      t.ok(scans.length > 0, `${JSON.stringify(values[0])}: an index read`);
      for (const scan of scans) {
        if (!t.ok(scan['Index Cond'] !== undefined, `${JSON.stringify(values[0])}: ${scan['Node Type']} ${scan['Index Name'] ?? ''} has an index condition`)) t.comment(JSON.stringify(plan));
      }
    }
  } finally {
    await query('rollback');
  }
});
