/**
 * Every control-plane error body carries `param`, as OpenAI's and the node's do (docs/errors.md):
 * the first offending field of a schema refusal — a body field, a nested one, a query or path
 * field, an unknown field's name — and null for every other error (404s, bad JSON, 401). A field
 * name that could be a pasted secret is not echoed back as `param`.
 */
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, uniqueConfigName } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { app, call } = await configApp(t, db.url);

interface ErrorReply { error: { message: string; type: string; param: string | null; code: string } }
const errorOf = (res: { json<T>(): T }): ErrorReply['error'] => res.json<ErrorReply>().error;

t.test('a schema refusal names its first offending field as param', async (t) => {
  const cases: Array<[string, 'GET' | 'POST' | 'PATCH', string, unknown, string]> = [
    ['a body field of the wrong type', 'POST', '/api/v1/accounts', { name: 12 }, 'name'],
    ['the first of several bad fields', 'POST', '/api/v1/accounts', { name: 12, status: 'nope' }, 'name'],
    ['a second field once the first is fine', 'POST', '/api/v1/accounts', { name: uniqueConfigName('acct-param'), status: 'nope' }, 'status'],
    ['an unknown body field', 'POST', '/api/v1/accounts', { name: uniqueConfigName('acct-param'), colour: 'red' }, 'colour'],
    ['a query field', 'GET', '/api/v1/accounts?limit=0', undefined, 'limit'],
    ['an unknown query field', 'GET', '/api/v1/api-keys?acount=x', undefined, 'acount'],
    ['a path field', 'GET', `/api/v1/accounts/${'a'.repeat(129)}`, undefined, 'name'],
    ['a node field (its own validation)', 'POST', '/api/v1/nodes', { name: uniqueConfigName('node-param'), surfaces: ['tools'], address: 'edge.example.com', controlPlaneUrl: 'https://cp.example.com' }, 'surfaces'],
  ];
  for (const [what, method, url, body, param] of cases) {
    const res = await call(method, url, body);
    t.equal(res.statusCode, 400, what);
    t.same(Object.keys(errorOf(res)).sort(), ['code', 'message', 'param', 'type'], `${what}: the four fields`);
    t.equal(errorOf(res).param, param, what);
    t.equal(errorOf(res).code, 'ZN_ERR_CP_INVALID_REQUEST', what);
  }
});

t.test('a nested field is named by its path, as the message names it', async (t) => {
  const res = await call('POST', '/api/v1/routes', { alias: uniqueConfigName('route-param'), targets: [{ upstream: 'x', model: 'm', weight: 'heavy' }] });
  t.equal(res.statusCode, 400);
  const error = errorOf(res);
  t.equal(error.param, 'targets[0].weight', 'the path into the array');
  t.ok(error.message.startsWith('targets[0].weight: '), 'the message names the same field');
});

t.test('a field name that could be a secret is not echoed as param', async (t) => {
  const secret = `sk-proj-${'x'.repeat(40)}`;
  const res = await call('POST', '/api/v1/accounts', { name: uniqueConfigName('acct-param'), [secret]: 1 });
  t.equal(res.statusCode, 400);
  t.equal(errorOf(res).param, null, 'the object it is in (the body itself): null');
  t.notMatch(res.body, secret, 'nowhere in the answer');
});

t.test('an error that is not a schema refusal has param null', async (t) => {
  const notFound = await call('GET', `/api/v1/accounts/${uniqueConfigName('nobody')}`);
  t.equal(notFound.statusCode, 404);
  t.same(errorOf(notFound).param, null, 'an unknown account');
  t.ok('param' in errorOf(notFound), 'present, as null');

  const badJson = await call('POST', '/api/v1/accounts', '{"name":');
  t.equal(badJson.statusCode, 400);
  t.same(errorOf(badJson).param, null, 'a body that is not JSON');
  t.ok('param' in errorOf(badJson), 'present, as null');

  const noRoute = await call('GET', '/api/v1/no-such-route');
  t.equal(noRoute.statusCode, 404);
  t.ok('param' in errorOf(noRoute) && errorOf(noRoute).param === null, 'no such route');

  const unauthenticated = await app.inject({ method: 'GET', url: '/api/v1/accounts' });
  t.equal(unauthenticated.statusCode, 401);
  t.ok('param' in errorOf(unauthenticated) && errorOf(unauthenticated).param === null, 'no admin token');

  const emptyPatch = await call('POST', '/api/v1/accounts', { name: uniqueConfigName('acct-param') });
  t.equal(emptyPatch.statusCode, 201);
  const name = emptyPatch.json<{ account: { name: string } }>().account.name;
  const nothingToChange = await call('PATCH', `/api/v1/accounts/${name}`, {});
  t.equal(nothingToChange.statusCode, 400);
  t.ok('param' in errorOf(nothingToChange) && errorOf(nothingToChange).param === null, 'a rule about the whole body names no field');
});
