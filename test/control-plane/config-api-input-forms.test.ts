/**
 * Input the config admin API once mishandled although it looked valid: a URL scheme in upper case
 * (a 500 from the table's CHECK), account names shaped like a UUID (billing routes take a name or
 * an id, so such a name could take another account's top-ups), the names `.` and `..` (URL clients
 * resolve them away, so the thing could never be reached by its path), JSON with a `__proto__`
 * key (answered as if it were not JSON), and JSON writing a key twice (the last value taken). Rows named before the name rules stay readable.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { assembleBundle, readFleetConfig } from '../../control-plane/src/config/bundle-builder.js';
import type { BundleNode } from '../../control-plane/src/config/bundle-builder.js';
import { configBundleSchema } from '../../proto/src/index.js';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { bearer, migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { app, call, log, secretBox } = await configApp(t, db.url);

interface ErrorReply { error: { code: string; message: string } }
const errorOf = (res: { json<T>(): T }): Partial<ErrorReply['error']> => res.json<Partial<ErrorReply>>().error ?? {};
const internalErrors = (): number => log.lines().filter((line) => line.level === 50).length;

await app.listen({ host: '127.0.0.1', port: 0 });
const { port } = app.server.address() as AddressInfo;

/** A request whose path is sent exactly as written (as `curl --path-as-is` does): `..` is not resolved away. */
function rawRequest(method: string, path: string, body?: unknown): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request({
      host: '127.0.0.1', port, method, path,
      headers: { ...bearer, ...(payload === undefined ? {} : { 'content-type': 'application/json' }) },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => { text += chunk; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(payload);
  });
}

t.test('an upper-case URL scheme is accepted and stored in lower case, and the bundle nodes get takes it', async (t) => {
  const before = internalErrors();
  const upstream = uniqueConfigName('up-scheme');
  const created = expectStatus<{ upstream: { baseUrl: string } }>(
    await call('POST', '/api/v1/upstreams', { name: upstream, kind: 'openai', baseUrl: 'HTTPS://API.Example.com/v1/' }), 201);
  t.equal(created.upstream.baseUrl, 'https://API.Example.com/v1', 'the scheme is lowered; the rest is kept, less the trailing /');

  const patched = expectStatus<{ upstream: { baseUrl: string } }>(
    await call('PATCH', `/api/v1/upstreams/${upstream}`, { baseUrl: 'Https://api.example.com/v2' }), 200);
  t.equal(patched.upstream.baseUrl, 'https://api.example.com/v2');

  const toolServer = `tools-scheme-${process.pid % 1000}`;
  const tool = expectStatus<{ toolServer: { url: string } }>(await call('PUT', `/api/v1/tool-servers/${toolServer}`, { url: 'HTTP://127.0.0.1:9/MCP' }), 201);
  t.equal(tool.toolServer.url, 'http://127.0.0.1:9/MCP', 'only the scheme is lowered');
  t.equal(internalErrors(), before, 'no internal error');

  const alias = uniqueConfigName('alias-scheme');
  expectStatus(await call('POST', '/api/v1/routes', { alias, targets: [{ upstream, model: 'm' }] }), 201);
  const fleet = await readFleetConfig(pool, secretBox!);
  const node: BundleNode = { nodeId: 'node-1', nodeName: 'edge-1', node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 0, fullPolicy: 'reject' } } };
  const parsed = configBundleSchema.safeParse(assembleBundle(7, node, fleet));
  t.ok(parsed.success, 'the bundle schema accepts the stored values');
  t.equal(parsed.data?.upstreams.find((u) => u.name === upstream)?.baseUrl, 'https://api.example.com/v2');
  t.equal(parsed.data?.toolServers.find((s) => s.name === toolServer)?.url, 'http://127.0.0.1:9/MCP');
});

t.test("an account cannot be named with a UUID, so a top-up addressed to an account's id reaches that account", async (t) => {
  const acme = expectStatus<{ account: { id: string } }>(await call('POST', '/api/v1/accounts', { name: uniqueConfigName('acme') }), 201).account;
  for (const name of [acme.id, acme.id.toUpperCase(), '00000000-0000-0000-0000-000000000000']) {
    const res = await call('POST', '/api/v1/accounts', { name });
    t.equal(res.statusCode, 400, name);
    t.same(errorOf(res), { code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', param: 'name', message: 'name: must not be shaped like a UUID (accounts are also addressed by id)' }, name);
  }
  const { rows } = await pool.query<{ n: number }>('select count(*)::int as n from accounts where lower(name) = $1', [acme.id]);
  t.equal(rows[0]!.n, 0, 'nothing was created');

  expectStatus(await call('POST', `/api/v1/accounts/${acme.id}/credits`, { amountMicros: 5_000_000 }), 201);
  const balance = expectStatus<{ balance: { accountId: string; balanceMicros: number } }>(await call('GET', `/api/v1/accounts/${acme.id}/balance`), 200).balance;
  t.same([balance.accountId, balance.balanceMicros], [acme.id, 5_000_000]);

  t.test('an account named so before the rule stays readable by its name', async (t) => {
    const legacy = '11111111-2222-3333-4444-555555555555';
    await pool.query('insert into accounts (name) values ($1)', [legacy]);
    t.equal(expectStatus<{ name: string }>(await call('GET', `/api/v1/accounts/${legacy}`), 200).name, legacy);
  });
});

t.test("'.' and '..' cannot name a new account, upstream, route, policy or price; things named so before stay reachable", async (t) => {
  expectStatus(await call('POST', '/api/v1/upstreams', { name: uniqueConfigName('up-dots'), kind: 'openai', baseUrl: 'https://api.example.com/v1' }), 201);
  const upstream = uniqueConfigName('up-dots-target');
  expectStatus(await call('POST', '/api/v1/upstreams', { name: upstream, kind: 'openai', baseUrl: 'https://api.example.com/v1' }), 201);
  const rule = "must not be '.' or '..' (URL clients drop them from a path)";
  for (const dots of ['.', '..']) {
    const creates: Array<[url: string, body: Record<string, unknown>, field: string]> = [
      ['/api/v1/accounts', { name: dots }, 'name'],
      ['/api/v1/upstreams', { name: dots, kind: 'openai', baseUrl: 'https://api.example.com/v1' }, 'name'],
      ['/api/v1/routes', { alias: dots, targets: [{ upstream, model: 'm' }] }, 'alias'],
      ['/api/v1/rate-limit-policies', { name: dots, requestsPerMinute: 10 }, 'name'],
      ['/api/v1/guardrail-policies', { name: dots, rules: [] }, 'name'],
    ];
    for (const [url, body, field] of creates) {
      const res = await call('POST', url, body);
      t.equal(res.statusCode, 400, `${url} ${dots}`);
      t.equal(errorOf(res).message, `${field}: ${rule}`, `${url} ${dots}`);
    }
    const price = await rawRequest('PUT', `/api/v1/prices/${dots === '.' ? '%2E' : '..'}`, { inputMicrosPerToken: 1, outputMicrosPerToken: 1 });
    t.equal(price.status, 400, `PUT /prices/${dots}`);
    t.equal((JSON.parse(price.body) as Partial<ErrorReply>).error?.message, `model: ${rule}`, `PUT /prices/${dots}`);
  }
  const { rows } = await pool.query<{ n: number }>(
    `select (select count(*) from accounts where name in ('.', '..')) + (select count(*) from upstreams where name in ('.', '..'))
          + (select count(*) from routes where alias in ('.', '..')) + (select count(*) from rate_limit_policies where name in ('.', '..'))
          + (select count(*) from guardrail_policies where name in ('.', '..')) + (select count(*) from prices where model in ('.', '..')) as n`,
  );
  t.equal(Number(rows[0]!.n), 0, 'nothing was created');

  t.test('an account and a price named ".." before the rule can still be read and changed by a client that sends the path as is', async (t) => {
    await pool.query("insert into accounts (name) values ('..')");
    await pool.query("insert into prices (model, input_micros_per_token, output_micros_per_token) values ('..', 1, 1)");
    const account = await rawRequest('GET', '/api/v1/accounts/..');
    t.equal(account.status, 200, account.body);
    const price = await rawRequest('PUT', '/api/v1/prices/..', { inputMicrosPerToken: 2, outputMicrosPerToken: 3 });
    t.equal(price.status, 200, price.body);
    t.equal(JSON.parse(price.body).price.inputMicrosPerToken, 2);
  });
});

t.test('a body with a __proto__ or constructor.prototype key is a 400 naming the key, not "not valid JSON"', async (t) => {
  const name = uniqueConfigName('acme-proto');
  for (const raw of [`{"name":"${name}","__proto__":{"status":"suspended"}}`, `{"name":"${name}","constructor":{"prototype":{"status":"suspended"}}}`]) {
    JSON.parse(raw);
    const res = await call('POST', '/api/v1/accounts', raw);
    t.equal(res.statusCode, 400, raw);
    t.same(errorOf(res), {
      code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', param: null,
      message: 'The request body has a "__proto__" or "constructor.prototype" key, which the control plane does not accept; remove it.',
    }, raw);
  }
  t.equal((await call('GET', `/api/v1/accounts/${name}`)).statusCode, 404, 'nothing was created');
  const broken = await call('POST', '/api/v1/accounts', `{"name":"${name}",`);
  t.same([broken.statusCode, errorOf(broken).message], [400, 'The request body is not valid JSON.'], 'broken JSON is still invalid JSON');
  const withBom = await call('POST', '/api/v1/accounts', `\ufeff{"name":"${name}","__proto__":{}}`);
  t.match(errorOf(withBom).message, /"__proto__"/, 'a body with a byte order mark too');
  t.equal(expectStatus<{ account: { name: string } }>(await call('POST', '/api/v1/accounts', `{"name":"${name}"}`), 201).account.name, name, 'a clean body is fine');
});

t.test('a body that writes a key twice in one object is a 400 naming the key, and nothing is done', async (t) => {
  const name = uniqueConfigName('acme-twice');
  const account = expectStatus<{ account: { id: string } }>(await call('POST', '/api/v1/accounts', `{"name":"${name}"}`), 201).account;
  const twice = await call('POST', `/api/v1/accounts/${name}/credits`, '{"amountMicros": 1, "amountMicros": 1000000}');
  t.equal(twice.statusCode, 400);
  t.same(errorOf(twice), {
    code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', param: null,
    message: 'The request body writes the key "amountMicros" twice in one object; send each key once.',
  });
  const nested = await call('POST', '/api/v1/guardrail-policies', `{"name":"${uniqueConfigName('p')}","rules":[{"detector":"email","action":"mask","action":"flag","on":"input"}]}`);
  t.equal(errorOf(nested).message, 'The request body writes the key "action" twice in one object; send each key once.', 'in a nested object too');
  const escaped = await call('POST', '/api/v1/accounts', `{"name":"${uniqueConfigName('x')}","na\\u006de":"y"}`);
  t.equal(escaped.statusCode, 400, 'a key written once plainly and once escaped is the same key');
  const { rows } = await pool.query<{ n: number }>('select count(*)::int as n from billing_ledger where account_id = $1', [account.id]);
  t.equal(rows[0]!.n, 0, 'nothing was credited');
  // The same key in sibling objects, or as a value, is no repeat.
  const siblings = await call('POST', '/api/v1/guardrail-policies', `{"name":"${uniqueConfigName('q')}","rules":[{"detector":"email","action":"mask","on":"input"},{"detector":"phone","action":"flag","on":"input"}]}`);
  t.equal(siblings.statusCode, 201, siblings.body);
});

t.test("a field name not shaped like one (a secret pasted as a key) is not quoted back in the 400 or the log; past five unknown fields they are counted", async (t) => {
  const secret = `sk-proj-${'S'.repeat(40)}`;
  const long = 'k'.repeat(200_000);
  const before = log.lines().length;
  for (const [what, res] of [
    ['a config body', await call('POST', '/api/v1/accounts', { name: uniqueConfigName('pasted'), [secret]: 1 })],
    ['a nested config body', await call('POST', '/api/v1/guardrail-policies', { name: uniqueConfigName('p'), rules: [{ detector: 'email', action: 'mask', on: 'input', [secret]: 1 }] })],
    ['a query', await call('GET', `/api/v1/accounts?${secret}=1`)],
    ['a very long key', await call('POST', '/api/v1/accounts', { name: uniqueConfigName('long'), [long]: 1 })],
    ['a node body', await call('POST', '/api/v1/nodes', { name: 'edge-pasted', surfaces: ['model'], address: 'e.example.com', controlPlaneUrl: 'https://cp.example.com', [secret]: 1 })],
    ['a key written twice', await call('POST', '/api/v1/accounts', `{"name":"${uniqueConfigName('twice')}","${secret}":1,"${secret}":2}`)],
  ] as const) {
    t.equal(res.statusCode, 400, what);
    t.notOk(res.body.includes('SSSSSSSS') || res.body.includes('kkkkkkkk'), `${what}: the name is not in the answer (${res.body.slice(0, 200)})`);
    t.match(errorOf(res).message, /a field name of \d+ characters, not shown/, `${what}: its length is`);
    t.ok(res.body.length < 1000, `${what}: the answer is short (${res.body.length} bytes)`);
  }
  // The request line logs the URL as sent (a query's names included); the refusal's reason is what must not quote it.
  const logged = log.lines().slice(before).filter((line) => line.req === undefined).map((line) => JSON.stringify(line)).join('\n');
  t.match(logged, /a field name of \d+ characters, not shown/, 'the refusals are logged');
  t.notOk(logged.includes('SSSSSSSS') || logged.includes('kkkkkkkk'), 'the refusals are logged without the name');
  const many = await call('POST', '/api/v1/accounts', { name: uniqueConfigName('many'), ...Object.fromEntries(Array.from({ length: 12 }, (_, i) => [`extra${i}`, 1])) });
  t.match(errorOf(many).message, /^extra0: unknown field; .*extra4: unknown field; and 7 more unknown fields$/, 'five named, the rest counted');
  const manyOnNode = await call('POST', '/api/v1/nodes', { name: 'edge-many', surfaces: ['model'], address: 'e.example.com', controlPlaneUrl: 'https://cp.example.com', ...Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [`extra${i}`, 1])) });
  t.match(errorOf(manyOnNode).message, /^extra0: unknown field; .*extra4: unknown field; and 1995 more unknown fields$/, 'on the node routes too');
  const typo = await call('POST', '/api/v1/accounts', { name: uniqueConfigName('typo'), stauts: 'active' });
  t.equal(errorOf(typo).message, 'stauts: unknown field', 'a typo of a field is still named');
});

t.test('every answer says Cache-Control: no-store, the one carrying a new key\'s secret, refusals and health included', async (t) => {
  const account = uniqueConfigName('nostore');
  expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
  const created = await call('POST', '/api/v1/api-keys', { account, name: 'k', allowedModels: null });
  t.equal(created.statusCode, 201);
  t.equal(created.headers['cache-control'], 'no-store', 'the answer with the secret');
  t.equal((await call('GET', '/api/v1/api-keys')).headers['cache-control'], 'no-store', 'a list');
  t.equal((await app.inject({ method: 'GET', url: '/api/v1/accounts' })).headers['cache-control'], 'no-store', 'a 401');
  t.equal((await call('GET', '/api/v1/nothing-here')).headers['cache-control'], 'no-store', 'a 404');
  t.equal((await app.inject({ method: 'GET', url: '/healthz' })).headers['cache-control'], 'no-store', 'health');
  // The router refuses these before any hook runs.
  t.equal((await call('GET', '/api/v1/accounts/%E0%A4%A')).headers['cache-control'], 'no-store', 'an undecodable path');
  t.equal((await call('GET', `/api/v1/accounts/${'a'.repeat(600)}`)).headers['cache-control'], 'no-store', 'a path segment too long');
});
