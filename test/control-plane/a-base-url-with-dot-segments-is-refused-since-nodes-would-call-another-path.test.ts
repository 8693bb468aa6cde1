// An upstream's baseUrl and a tool server's url with a `.` or `..` path segment (also `%2e`-encoded,
// any case) are refused 400 ZN_ERR_CP_INVALID_REQUEST naming the segment: nodes resolve the URL with
// the WHATWG parser, which removes dot segments (`/v1/../admin` is `/admin`), so the path stored
// and shown in the console would not be the one called. Nothing is stored (on create, no object;
// on an edit, the object unchanged) and no config version recorded. A plain path, and names that
// merely contain dots (`.well-known`, `...`, `a..b`), are kept as written; a query or fragment is
// still refused with its own rule.
import t from 'tap';
import type { Test } from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, etagOf, expectStatus, uniqueConfigName } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { call, version } = await configApp(t, db.url);

interface ErrorReply { error: { code: string; message: string } }

const FIX = "write the path without '.' or '..' segments";
const DOTTED: Array<[url: string, segment: string, readAs?: string]> = [
  ['http://10.0.0.5:8000/v1/../admin', '..'],
  ['http://10.0.0.5:8000/./v1', '.'],
  ['http://10.0.0.5:8000/v1/%2E%2E/admin', '%2E%2E', '..'],
  ['http://10.0.0.5:8000/v1/.%2e', '.%2e', '..'],
  ['https://api.example.com/v1/%2e', '%2e', '.'],
  ['https://api.example.com/v1/..', '..'],
];
const PLAIN = ['http://10.0.0.5:8000/v1', 'https://api.example.com/.well-known/v1', 'https://api.example.com/v1/...', 'https://api.example.com/a..b/%2e%2e%2e'];

const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
function ruleFor(field: string, segment: string, readAs: string | undefined): RegExp {
  const read = readAs === undefined ? '' : `read as '${escape(readAs)}'; `;
  return new RegExp(`^${field}: must not contain the path segment '${escape(segment)}' \\(${read}the URL parser resolves it away, so nodes would call another path\\); ${escape(FIX)}$`);
}

function expectRefused(t: Test, res: { statusCode: number; json<T>(): T }, rule: RegExp, what: string): void {
  t.equal(res.statusCode, 400, `${what}: 400`);
  const error = res.json<Partial<ErrorReply>>().error;
  t.equal(error?.code, 'ZN_ERR_CP_INVALID_REQUEST', `${what}: the code`);
  t.match(error?.message, rule, `${what}: names the segment and says to write the path without it`);
}

t.test('an upstream baseUrl with a dot segment is refused on POST and PATCH and nothing is stored', async (t) => {
  const name = uniqueConfigName('up');
  const created = expectStatus<{ upstream: { baseUrl: string } }>(await call('POST', '/api/v1/upstreams', { name, kind: 'openai-compatible', baseUrl: 'http://10.0.0.5:8000/v1' }), 201);
  t.equal(created.upstream.baseUrl, 'http://10.0.0.5:8000/v1', 'a plain baseUrl is accepted as written');
  const before = await call('GET', `/api/v1/upstreams/${name}`);
  const versionBefore = await version();
  for (const [baseUrl, segment, readAs] of DOTTED) {
    const rule = ruleFor('baseUrl', segment, readAs);
    const other = uniqueConfigName('up-dots');
    expectRefused(t, await call('POST', '/api/v1/upstreams', { name: other, kind: 'openai-compatible', baseUrl }), rule, `POST ${baseUrl}`);
    t.equal((await call('GET', `/api/v1/upstreams/${other}`)).statusCode, 404, `POST ${baseUrl}: no upstream created`);
    expectRefused(t, await call('PATCH', `/api/v1/upstreams/${name}`, { baseUrl }), rule, `PATCH ${baseUrl}`);
  }
  const after = await call('GET', `/api/v1/upstreams/${name}`);
  t.equal(after.json<{ baseUrl: string }>().baseUrl, 'http://10.0.0.5:8000/v1', 'the upstream keeps its baseUrl');
  t.equal(etagOf(after), etagOf(before), 'and is unchanged');
  t.equal(await version(), versionBefore, 'no config version recorded');
  const listed = (await call('GET', '/api/v1/upstreams')).json<{ upstreams: Array<{ name: string }> }>().upstreams;
  t.notOk(listed.some((u) => u.name.includes('up-dots')), 'none of the refused upstreams is listed');

  expectRefused(t, await call('PATCH', `/api/v1/upstreams/${name}`, { baseUrl: 'http://10.0.0.5:8000/v1/..?a=1' }),
    /^baseUrl: must not contain a query or fragment$/, 'a query (with a dot segment before it)');
  expectRefused(t, await call('POST', '/api/v1/upstreams', { name: uniqueConfigName('up-dots'), kind: 'openai', baseUrl: 'https://a.example/v1#x' }),
    /^baseUrl: must not contain a query or fragment$/, 'a fragment');
});

t.test('an upstream baseUrl with dots that are not a whole segment is kept as written', async (t) => {
  for (const baseUrl of PLAIN) {
    const name = uniqueConfigName('up-plain');
    const res = await call('POST', '/api/v1/upstreams', { name, kind: 'openai', baseUrl });
    t.equal(res.statusCode, 201, `${baseUrl}: ${res.statusCode === 201 ? 'accepted' : res.body}`);
    t.equal((await call('GET', `/api/v1/upstreams/${name}`)).json<{ baseUrl: string }>().baseUrl, baseUrl, `${baseUrl}: stored as written`);
  }
  const name = uniqueConfigName('up-plain');
  expectStatus(await call('POST', '/api/v1/upstreams', { name, kind: 'openai', baseUrl: 'https://a.example/v1' }), 201);
  const patched = await call('PATCH', `/api/v1/upstreams/${name}`, { baseUrl: 'https://a.example/.well-known/v2' });
  t.equal(patched.statusCode, 200, 'a PATCH to a plain path is accepted');
});

t.test("a tool server's url with a dot segment is refused on create and replace, and nothing is stored", async (t) => {
  const url = `/api/v1/tool-servers/${uniqueConfigName('tools')}`;
  expectStatus(await call('PUT', url, { url: 'http://10.0.0.5:8000/mcp' }), 201);
  const before = await call('GET', url);
  const versionBefore = await version();
  for (const [endpoint, segment, readAs] of DOTTED) {
    const rule = ruleFor('url', segment, readAs);
    const other = `/api/v1/tool-servers/${uniqueConfigName('tools-dots')}`;
    expectRefused(t, await call('PUT', other, { url: endpoint }), rule, `PUT (create) ${endpoint}`);
    t.equal((await call('GET', other)).statusCode, 404, `PUT (create) ${endpoint}: no tool server created`);
    expectRefused(t, await call('PUT', url, { url: endpoint }), rule, `PUT (replace) ${endpoint}`);
  }
  const after = await call('GET', url);
  t.equal(after.json<{ url: string }>().url, 'http://10.0.0.5:8000/mcp', 'the tool server keeps its url');
  t.equal(etagOf(after), etagOf(before), 'and is unchanged');
  t.equal(await version(), versionBefore, 'no config version recorded');
  for (const plain of PLAIN) {
    const res = await call('PUT', `/api/v1/tool-servers/${uniqueConfigName('tools-plain')}`, { url: plain });
    t.equal(res.statusCode, 201, `${plain}: ${res.statusCode === 201 ? 'accepted' : res.body}`);
  }
  expectRefused(t, await call('PUT', url, { url: 'http://10.0.0.5:8000/mcp?x=1' }), /^url: must not contain a query or fragment$/, 'a query');
});
