/**
 * The admin API's edges of input: long names in paths, text PostgreSQL cannot store, URLs the
 * router cannot decode, body limits per route, times, URLs with whitespace, and content types.
 * Every refusal is a documented code in the documented body with x-request-id, never a 500.
 */
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { bearer, migratedPool, validNodeBody } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { app, call, log } = await configApp(t, db.url);

interface ErrorReply { error: { code: string; message: string; type: string } }

/** A name of exactly `length` characters no other test uses. */
const longName = (length: number): string => {
  const prefix = uniqueConfigName('n');
  return prefix + 'x'.repeat(length - prefix.length);
};

const internalErrors = (): number => log.lines().filter((line) => line.level === 50).length;

t.test('a name of 101 to 128 characters can be read, changed and deleted by its path', async (t) => {
  for (const length of [101, 128]) {
    const account = longName(length);
    expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
    t.equal(expectStatus<{ name: string }>(await call('GET', `/api/v1/accounts/${account}`), 200).name, account);
    expectStatus(await call('PATCH', `/api/v1/accounts/${account}`, { status: 'suspended' }), 200);
    expectStatus(await call('POST', `/api/v1/accounts/${account}/credits`, { amountMicros: 5 }), 201);
    expectStatus(await call('GET', `/api/v1/accounts/${account}/balance`), 200);

    const upstream = longName(length);
    expectStatus(await call('POST', '/api/v1/upstreams', { name: upstream, kind: 'openai', baseUrl: 'https://a.example' }), 201);
    expectStatus(await call('GET', `/api/v1/upstreams/${upstream}`), 200);
    expectStatus(await call('PATCH', `/api/v1/upstreams/${upstream}`, { timeoutMs: 1000 }), 200);

    // An alias with '/' travels as %2F: three characters in the path for one in the name.
    const alias = `team/${longName(length - 5)}`;
    expectStatus(await call('POST', '/api/v1/routes', { alias, targets: [{ upstream, model: 'm' }] }), 201);
    const encoded = encodeURIComponent(alias);
    expectStatus(await call('GET', `/api/v1/routes/${encoded}`), 200);
    expectStatus(await call('PUT', `/api/v1/routes/${encoded}`, { targets: [{ upstream, model: 'm2' }] }), 200);
    expectStatus(await call('DELETE', `/api/v1/routes/${encoded}`), 200);
    expectStatus(await call('DELETE', `/api/v1/upstreams/${upstream}`), 200);

    const model = longName(length);
    expectStatus(await call('PUT', `/api/v1/prices/${model}`, { inputMicrosPerToken: 1, outputMicrosPerToken: 1 }), 200);
    expectStatus(await call('DELETE', `/api/v1/prices/${model}`), 200);

    const policy = longName(length);
    expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: policy, requestsPerMinute: 5 }), 201);
    expectStatus(await call('DELETE', `/api/v1/rate-limit-policies/${policy}`), 200);
    expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: policy, rules: [] }), 201);
    expectStatus(await call('DELETE', `/api/v1/guardrail-policies/${policy}`), 200);
  }
});

t.test('a path name that cannot be a valid name is a 400 naming the field and rule, not a lookup', async (t) => {
  const cases: Array<[string, RegExp]> = [
    [`/api/v1/accounts/${'a'.repeat(129)}`, /^name: must be 1 to 128 characters/],
    [`/api/v1/upstreams/${'a'.repeat(300)}`, /^name: must be 1 to 128 characters/],
    ['/api/v1/accounts/a%20b', /^name: must be 1 to 128 characters/],
    ['/api/v1/nodes/Not_A_Node', /^name: must be 2 to 31 characters of lowercase letters/],
    ['/api/v1/tool-servers/Upper', /^name: must be 1 to 63 lower-case/],
  ];
  for (const [url, message] of cases) {
    const res = await call('GET', url);
    t.equal(res.statusCode, 400, url);
    t.match(res.json<ErrorReply>().error, { code: 'ZN_ERR_CP_INVALID_REQUEST', message }, url);
  }
  // A valid name that matches nothing is still the thing's 404.
  t.equal((await call('GET', `/api/v1/accounts/${'a'.repeat(128)}`)).json<ErrorReply>().error.code, 'ZN_ERR_CP_ACCOUNT_NOT_FOUND');
});

t.test('a path segment over 512 characters gets the documented body and x-request-id, without the path', async (t) => {
  const segment = 'q'.repeat(600);
  for (const headers of [bearer, {}]) {
    const res = await app.inject({ method: 'GET', url: `/api/v1/accounts/${segment}`, headers });
    t.equal(res.statusCode, 400);
    t.match(res.json<ErrorReply>().error, { code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', message: /longer than 512 characters/ });
    t.ok(res.headers['x-request-id'], 'x-request-id is set');
    t.notOk(res.body.includes(segment.slice(0, 50)), 'the path is not echoed');
  }
});

t.test('a path that cannot be %-decoded gets the documented body and x-request-id, without the path', async (t) => {
  for (const url of ['/api/v1/nodes/%E0%A4%A', '/api/enroll/%E0%A4%A', '/api/v1/accounts/secret-looking%E0%A4%A']) {
    const res = await app.inject({ method: 'GET', url, headers: { 'x-request-id': 'trace-bad-url-1' } });
    t.equal(res.statusCode, 400, url);
    t.same(Object.keys(res.json<Record<string, unknown>>()), ['error'], `${url}: only the error object`);
    t.match(res.json<ErrorReply>().error, { code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', message: /cannot be decoded/ }, url);
    t.equal(res.headers['x-request-id'], 'trace-bad-url-1', `${url}: the request id is echoed`);
    t.notOk(res.body.includes('%E0') || res.body.includes('secret-looking'), `${url}: the path is not echoed`);
  }
});

t.test('NUL or an unpaired surrogate in a path, query or body text field is a 400 naming the field, never a 500', async (t) => {
  const account = uniqueConfigName('acct');
  expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
  const before = internalErrors();
  // A lone surrogate cannot arrive in a path or query (its UTF-8 form does not %-decode), only
  // through a JSON \uD800 escape in a body.

  type Case = [method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE', url: string, body: unknown, field: string];
  const cases: Case[] = [
    ['GET', '/api/v1/nodes/a%00b', undefined, 'name'],
    ['GET', '/api/v1/accounts/a%00b', undefined, 'name'],
    ['GET', '/api/v1/accounts/a%00b/balance', undefined, 'account'],
    ['GET', '/api/v1/upstreams/a%00b', undefined, 'name'],
    ['GET', '/api/v1/routes/a%00b', undefined, 'alias'],
    ['DELETE', '/api/v1/prices/a%00b', undefined, 'model'],
    ['GET', '/api/v1/tool-servers/a%00b', undefined, 'name'],
    ['DELETE', '/api/v1/rate-limit-policies/a%00b', undefined, 'name'],
    ['GET', '/api/v1/api-keys/a%00b', undefined, 'id'],
    ['GET', '/api/v1/requests/a%00b', undefined, 'requestId'],
    ['GET', '/api/v1/requests?model=a%00b', undefined, "query field 'model'"],
    ['GET', '/api/v1/requests?keyId=%00', undefined, "query field 'keyId'"],
    ['GET', '/api/v1/leases?node=%00', undefined, "query field 'node'"],
    ['POST', '/api/v1/guardrail-policies', { name: 'g1', rules: [{ detector: 'keywords', keywords: ['a\u0000b'], action: 'flag', on: 'input' }] }, 'rules[0].keywords[0]'],
    ['POST', '/api/v1/guardrail-policies', { name: 'g2', rules: [{ detector: 'keywords', keywords: ['a\ud800b'], action: 'flag', on: 'input' }] }, 'rules[0].keywords[0]'],
    ['POST', '/api/v1/guardrail-policies', { name: 'g3', rules: [{ detector: 'regex', pattern: 'a\u0000', action: 'block', on: 'input' }] }, 'rules[0].pattern'],
    ['POST', '/api/v1/guardrail-policies', { name: 'g4', rules: [{ detector: 'regex', pattern: '\udc00x', action: 'block', on: 'input' }] }, 'rules[0].pattern'],
    ['POST', `/api/v1/accounts/${account}/credits`, { amountMicros: 1, reference: 'inv\u00001' }, 'reference'],
    ['POST', '/api/v1/upstreams', { name: 'u-nul', kind: 'openai', baseUrl: 'https://a.example/v1\u0000' }, 'baseUrl'],
    ['PUT', '/api/v1/tool-servers/t-nul', { url: 'https://a.example/mcp\u0000' }, 'url'],
    ['POST', '/api/v1/nodes', validNodeBody({ region: 'east\u0000' }), 'region'],
  ];
  for (const [method, url, body, field] of cases) {
    const res = await call(method, url, body);
    const what = `${method} ${url} ${field}`;
    t.equal(res.statusCode, 400, what);
    const error = res.json<ErrorReply>().error;
    t.equal(error.code, 'ZN_ERR_CP_INVALID_REQUEST', what);
    t.ok(error.message.startsWith(`${field}: must not contain NUL (U+0000) or unpaired UTF-16 surrogates`), `${what}: ${error.message}`);
  }
  t.equal(internalErrors(), before, 'no request failed with an internal error');
});

t.test('the node settings, delete and command routes have their documented body limits', async (t) => {
  const node = validNodeBody().name as string;
  expectStatus(await call('POST', '/api/v1/nodes', validNodeBody({ name: node })), 201);
  const send = (method: 'PATCH' | 'POST' | 'DELETE', url: string, bytes: number) =>
    app.inject({ method, url, headers: { ...bearer, 'content-type': 'application/json' }, payload: JSON.stringify({ pad: 'a'.repeat(bytes) }) });

  for (const [method, url] of [['PATCH', `/api/v1/nodes/${node}/settings`], ['DELETE', `/api/v1/nodes/${node}`]] as const) {
    const res = await send(method, url, 200 * 1024);
    t.equal(res.statusCode, 413, url);
    t.match(res.json<ErrorReply>().error, { code: 'ZN_ERR_CP_BODY_TOO_LARGE', message: /limit of 128 KiB/ }, url);
  }
  for (const kind of ['install', 'reenroll', 'upgrade']) {
    const url = `/api/v1/nodes/${node}/${kind}-command`;
    const res = await send('POST', url, 2 * 1024);
    t.equal(res.statusCode, 413, url);
    t.match(res.json<ErrorReply>().error, { code: 'ZN_ERR_CP_BODY_TOO_LARGE', message: /limit of 1 KiB/ }, url);
    // The CLI sends `{}`; no body at all works too.
    expectStatus(await call('POST', url, {}), 200);
    expectStatus(await call('POST', url), 200);
  }
  // The node is still there: nothing above reached a handler.
  expectStatus(await call('GET', `/api/v1/nodes/${node}`), 200);
});

t.test("a 413 names the route's own limit", async (t) => {
  const cases: Array<[string, number, RegExp]> = [
    ['/api/v1/accounts', 2 * 1024 * 1024, /limit of 1 MiB/],
    ['/api/v1/nodes', 200 * 1024, /limit of 128 KiB/],
    ['/api/enroll', 9 * 1024, /limit of 8 KiB/],
  ];
  for (const [url, bytes, message] of cases) {
    const res = await app.inject({
      method: 'POST', url, headers: { ...bearer, 'content-type': 'application/json' }, payload: JSON.stringify({ pad: 'a'.repeat(bytes) }),
    });
    t.equal(res.statusCode, 413, url);
    t.match(res.json<ErrorReply>().error, { code: 'ZN_ERR_CP_BODY_TOO_LARGE', message }, url);
  }
});

t.test('spend takes from and to only as unix ms or ISO 8601 with a time zone, from year 1 to 9999', async (t) => {
  for (const query of ['from=-200000-01-01T00:00:00Z', 'from=March%207,%202026', 'to=%2B275760-09-13T00:00:00.000Z', 'from=2026-03-07', 'to=999999999999999', 'from=yesterday']) {
    const res = await call('GET', `/api/v1/spend?${query}`);
    t.equal(res.statusCode, 400, query);
    t.match(res.json<ErrorReply>().error, { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /must be unix ms or an ISO 8601 date-time/ }, query);
  }
  const ok = expectStatus<{ from: string; to: string }>(await call('GET', '/api/v1/spend?from=0&to=2026-03-07T08:00:00%2B08:00'), 200);
  t.same([ok.from, ok.to], ['1970-01-01T00:00:00.000Z', '2026-03-07T00:00:00.000Z']);
  // Unix ms before 1970 (negative) as the same instants in ISO 8601; one ms before year 1 is refused.
  const early = expectStatus<{ from: string; to: string }>(await call('GET', '/api/v1/spend?from=-62135596800000&to=-1'), 200);
  t.same([early.from, early.to], ['0001-01-01T00:00:00.000Z', '1969-12-31T23:59:59.999Z']);
  expectStatus(await call('GET', '/api/v1/requests?from=-1&limit=1'), 200);
  const beforeYearOne = await call('GET', '/api/v1/spend?from=-62135596800001');
  t.equal(beforeYearOne.statusCode, 400, 'one ms before year 1');
  t.match(beforeYearOne.json<ErrorReply>().error, { message: /from year 1 to 9999/ });
  // curl "…?to=2026-03-07T08:00:00+08:00": the + arrives as a space; the answer says how to send it.
  for (const query of ['to=2026-03-07T08:00:00+08:00', 'to=2026-03-07T08:00:00.5+0800', '/requests?from=2026-03-07T08:00+08:00']) {
    const res = await call('GET', query.startsWith('/') ? `/api/v1${query}` : `/api/v1/spend?${query}`);
    t.equal(res.statusCode, 400, query);
    t.match(res.json<ErrorReply>().error.message, /a '\+' in a URL query is read as a space, so send \+08:00 as %2B08:00/, query);
  }
});

t.test('a spend window whose from is not before its to is refused naming from, not answered with no rows', async (t) => {
  for (const query of ['from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z', 'from=1772323200000&to=1772323200000', 'by=node&from=2000&to=1000']) {
    const res = await call('GET', `/api/v1/spend?${query}`);
    t.equal(res.statusCode, 400, query);
    t.same(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', param: 'from', message: "query field 'from': must be before 'to' (from is inclusive, to exclusive)" } }, query);
  }
  expectStatus(await call('GET', '/api/v1/spend?from=1000&to=1001'), 200);
});

t.test('a spend from in the future without a to is refused like a backwards window, not answered with one', async (t) => {
  // `to` defaults to now, after the schema's order check.
  const future = new Date(Date.now() + 24 * 3600 * 1000).toISOString();
  for (const query of [`from=${future}`, `by=key&from=${Date.now() + 60_000}`]) {
    const res = await call('GET', `/api/v1/spend?${query}`);
    t.equal(res.statusCode, 400, query);
    t.same(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', param: 'from', message: "query field 'from': must be before 'to' (from is inclusive, to exclusive)" } }, query);
  }
  const hourAgo = Date.now() - 3_600_000;
  const past = expectStatus<{ from: string; to: string }>(await call('GET', `/api/v1/spend?from=${hourAgo}`), 200);
  t.equal(past.from, new Date(hourAgo).toISOString());
  t.ok(Date.parse(past.to) > Date.parse(past.from), 'to defaults to now, after from');
});

t.test('spend refuses an ISO time finer than a millisecond, not cut to its millisecond', async (t) => {
  for (const query of ['from=2026-01-01T00:00:00Z&to=2026-01-01T00:00:00.0005Z', 'to=2026-01-01T00:00:00.1234%2B02:00']) {
    const res = await call('GET', `/api/v1/spend?${query}`);
    t.equal(res.statusCode, 400, query);
    t.same(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', param: 'to', message: "query field 'to': must have at most 3 fractional digits (such as 2026-03-07T00:00:00.123Z): times are kept to the millisecond" } }, query);
  }
  expectStatus(await call('GET', '/api/v1/spend?from=2026-01-01T00:00:00Z&to=2026-01-01T00:00:00.001Z'), 200);
});

t.test('a baseUrl or tool-server url with whitespace or a control character is refused, never stored altered', async (t) => {
  for (const bad of ['https://a.exa\tmple.com/v1', 'https://a.example.com/v1\n', ' https://a.example.com/v1', 'https://a.example.com/v 1', 'https://a.example.com/\u0085v1']) {
    const up = await call('POST', '/api/v1/upstreams', { name: uniqueConfigName('u'), kind: 'openai', baseUrl: bad });
    t.equal(up.statusCode, 400, JSON.stringify(bad));
    t.equal(up.json<ErrorReply>().error.message, 'baseUrl: must not contain spaces or control characters', JSON.stringify(bad));
    const tool = await call('PUT', `/api/v1/tool-servers/${uniqueConfigName('t')}`, { url: bad });
    t.equal(tool.statusCode, 400, JSON.stringify(bad));
    t.equal(tool.json<ErrorReply>().error.message, 'url: must not contain spaces or control characters', JSON.stringify(bad));
  }
});

t.test('a body that is not JSON in UTF-8 is 415 ZN_ERR_CP_UNSUPPORTED_MEDIA_TYPE', async (t) => {
  const cases: Array<[string, string]> = [
    ['text/plain', 'name=x'],
    ['application/json; charset=utf-16', '{"name":"acme-utf16"}'],
    ['application/json; charset="latin1"', '{"name":"acme-latin1"}'],
  ];
  for (const [contentType, payload] of cases) {
    for (const url of ['/api/v1/accounts', '/api/enroll']) {
      const res = await app.inject({ method: 'POST', url, headers: { ...bearer, 'content-type': contentType }, payload });
      t.equal(res.statusCode, 415, `${url} ${contentType}`);
      t.equal(res.json<ErrorReply>().error.code, 'ZN_ERR_CP_UNSUPPORTED_MEDIA_TYPE', `${url} ${contentType}`);
    }
  }
  t.equal((await call('GET', '/api/v1/accounts/acme-utf16')).statusCode, 404, 'nothing was created');
  const utf8 = await app.inject({
    method: 'POST', url: '/api/v1/accounts', headers: { ...bearer, 'content-type': 'application/json; charset=UTF-8' }, payload: '{"name":"acme-utf8"}',
  });
  t.equal(utf8.statusCode, 201, 'charset=utf-8 is fine');
  // Authentication still comes first.
  const noAuth = await app.inject({ method: 'POST', url: '/api/v1/accounts', headers: { 'content-type': 'application/json; charset=utf-16' }, payload: '{}' });
  t.equal(noAuth.statusCode, 401);
});

t.test('a compressed body is 415 ZN_ERR_CP_UNSUPPORTED_MEDIA_TYPE, never read as if it were plain JSON', async (t) => {
  const { gzipSync } = await import('node:zlib');
  for (const url of ['/api/v1/accounts', '/api/enroll']) {
    const res = await app.inject({
      method: 'POST', url, headers: { ...bearer, 'content-type': 'application/json', 'content-encoding': 'gzip' }, payload: gzipSync('{"name":"acme-gzip"}'),
    });
    t.equal(res.statusCode, 415, url);
    t.equal(res.json<ErrorReply>().error.code, 'ZN_ERR_CP_UNSUPPORTED_MEDIA_TYPE', url);
    t.match(res.json<ErrorReply>().error.message, /Content-Encoding "gzip" is not supported/, url);
  }
  t.equal((await call('GET', '/api/v1/accounts/acme-gzip')).statusCode, 404, 'nothing was created');
  const identity = await app.inject({
    method: 'POST', url: '/api/v1/accounts', headers: { ...bearer, 'content-type': 'application/json', 'content-encoding': 'identity' }, payload: '{"name":"acme-identity"}',
  });
  t.equal(identity.statusCode, 201, 'identity is no encoding');
});

t.test('a route that takes no body refuses fields instead of ignoring them, and accepts none or {}', async (t) => {
  const node = expectStatus<{ node: { name: string } }>(await call('POST', '/api/v1/nodes', validNodeBody()), 201).node.name;
  const withFields = await call('POST', `/api/v1/nodes/${node}/install-command`, { ttlSeconds: 60, kind: 'reenroll' });
  t.equal(withFields.statusCode, 400, withFields.body);
  t.match(withFields.json<ErrorReply>().error, { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /ttlSeconds|kind/ });
  t.equal((await call('POST', `/api/v1/nodes/${node}/install-command`)).statusCode, 200, 'no body');
  t.equal((await call('POST', `/api/v1/nodes/${node}/install-command`, {})).statusCode, 200, '{}');

  const account = uniqueConfigName('nobody');
  expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
  const key = expectStatus<{ apiKey: { id: string } }>(await call('POST', '/api/v1/api-keys', { account, name: 'k' }), 201).apiKey.id;
  const revoke = await call('POST', `/api/v1/api-keys/${key}/revoke`, { reason: 'leaked' });
  t.equal(revoke.statusCode, 400, 'a revoke with a field is refused, the key stays active');
  t.equal(expectStatus<{ status: string }>(await call('GET', `/api/v1/api-keys/${key}`), 200).status, 'active');
  const policy = uniqueConfigName('nobody');
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: policy, requestsPerMinute: 5 }), 201);
  t.equal((await call('DELETE', `/api/v1/rate-limit-policies/${policy}`, { force: true })).statusCode, 400, 'a delete with a field');
  t.equal((await call('DELETE', `/api/v1/rate-limit-policies/${policy}`)).statusCode, 200, 'a delete without one');
  t.equal((await call('DELETE', `/api/v1/nodes/${node}`, { purge: true })).statusCode, 400, 'a node delete with a field');
});

t.test('an empty body labelled application/json is no body: accepted where none is needed, named where one is', async (t) => {
  // Clients that set content-type: application/json on every request send these; '' is no JSON.
  const node = expectStatus<{ node: { name: string } }>(await call('POST', '/api/v1/nodes', validNodeBody()), 201).node.name;
  t.equal((await call('POST', `/api/v1/nodes/${node}/install-command`, '')).statusCode, 200, 'install-command');
  const account = uniqueConfigName('empty');
  expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
  const key = expectStatus<{ apiKey: { id: string } }>(await call('POST', '/api/v1/api-keys', { account, name: 'k' }), 201).apiKey.id;
  t.equal(expectStatus<{ apiKey: { status: string } }>(await call('POST', `/api/v1/api-keys/${key}/revoke`, ''), 200).apiKey.status, 'revoked');
  const policy = uniqueConfigName('empty');
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: policy, requestsPerMinute: 5 }), 201);
  t.equal((await call('DELETE', `/api/v1/rate-limit-policies/${policy}`, '')).statusCode, 200, 'a delete');

  const create = await call('POST', '/api/v1/accounts', '');
  t.equal(create.statusCode, 400, 'a route that needs a body still refuses none');
  t.equal(create.json<ErrorReply>().error.code, 'ZN_ERR_CP_INVALID_REQUEST');
  t.match(create.json<ErrorReply>().error.message, /^body: /, 'the body is named, not called invalid JSON');
  t.equal(internalErrors(), 0);
});
