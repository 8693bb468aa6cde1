/**
 * The tool servers admin API (MCP servers behind /mcp/{name} on nodes) against real PostgreSQL:
 * put creates then replaces, list/show/delete, field rules, every change a new config version, the
 * server's key sealed and never returned, and the fleet config nodes get carries the server with
 * its key (through the publisher's spliced bytes too).
 */
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { assembleBundle, readFleetConfig } from '../../control-plane/src/config/bundle-builder.js';
import type { BundleNode } from '../../control-plane/src/config/bundle-builder.js';
import { renderFleet, spliceBundle } from '../../control-plane/src/config/config-publisher.js';
import { openToolServerSecret, toolServerSecretContext } from '../../control-plane/src/tools/tool-server-secret.js';
import { canonicalJson, configBundleSchema } from '../../proto/src/index.js';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, listenConfigChanges } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call, log, secretBox, version } = await configApp(t, db.url);

interface ToolServerView {
  id: string; name: string; url: string; hasApiKey: boolean; timeoutMs: number; callMicros: number; createdAt: string; updatedAt: string;
}
interface Mutation { toolServer: ToolServerView; configVersion: number }

let counter = 0;
/** A tool server name (the bundle's lower-case rule) no other test here used. */
function uniqueName(): string {
  counter += 1;
  return `tools-${process.pid % 1000}-${counter}`;
}

function errorOf(res: { json<T>(): T }): { code: string; message: string } {
  return res.json<{ error: { code: string; message: string } }>().error;
}

t.test('a put creates the server (201) and a second put replaces it (200), each a new config version', async (t) => {
  const listener = await listenConfigChanges(t, db.url);
  const name = uniqueName();
  const before = await version();
  const created = expectStatus<Mutation>(await call('PUT', `/api/v1/tool-servers/${name}`, { url: 'http://127.0.0.1:9/mcp' }), 201);
  t.match(created.toolServer, { name, url: 'http://127.0.0.1:9/mcp', hasApiKey: false, timeoutMs: 60_000, callMicros: 0 });
  t.same(Object.keys(created.toolServer).sort(), ['callMicros', 'createdAt', 'hasApiKey', 'id', 'name', 'timeoutMs', 'updatedAt', 'url']);
  t.ok(created.configVersion > before, 'the create is a new config version');
  await listener.heard(created.configVersion);

  const replaced = expectStatus<Mutation>(
    await call('PUT', `/api/v1/tool-servers/${name}`, { url: 'https://tools.example/mcp/', timeoutMs: 5000, callMicros: 250 }), 200);
  t.match(replaced.toolServer, { id: created.toolServer.id, name, url: 'https://tools.example/mcp/', timeoutMs: 5000, callMicros: 250 });
  t.ok(replaced.configVersion > created.configVersion, 'the replace is another config version');
  await listener.heard(replaced.configVersion);

  t.same(expectStatus<ToolServerView>(await call('GET', `/api/v1/tool-servers/${name}`), 200), replaced.toolServer);
  const listed = expectStatus<{ toolServers: ToolServerView[] }>(await call('GET', '/api/v1/tool-servers'), 200);
  t.same(listed.toolServers.find((s) => s.name === name), replaced.toolServer);
});

t.test('delete removes the server, bumps the version, and frees the name', async (t) => {
  const name = uniqueName();
  const created = expectStatus<Mutation>(await call('PUT', `/api/v1/tool-servers/${name}`, { url: 'http://127.0.0.1:9/mcp' }), 201);
  const deleted = expectStatus<{ deleted: string; configVersion: number }>(await call('DELETE', `/api/v1/tool-servers/${name}`), 200);
  t.equal(deleted.deleted, name);
  t.ok(deleted.configVersion > created.configVersion);
  for (const [method, url] of [['GET', `/api/v1/tool-servers/${name}`], ['DELETE', `/api/v1/tool-servers/${name}`]] as const) {
    const res = await call(method, url);
    t.equal(res.statusCode, 404, `${method} after delete`);
    t.equal(errorOf(res).code, 'ZN_ERR_CP_TOOL_SERVER_NOT_FOUND');
  }
  const listed = expectStatus<{ toolServers: ToolServerView[] }>(await call('GET', '/api/v1/tool-servers'), 200);
  t.notOk(listed.toolServers.some((s) => s.name === name), 'not listed');
  const again = expectStatus<Mutation>(await call('PUT', `/api/v1/tool-servers/${name}`, { url: 'http://127.0.0.1:9/mcp' }), 201);
  t.not(again.toolServer.id, created.toolServer.id, 'a new server under the old name');
});

t.test('bad names and bodies are refused field by field, and change nothing', async (t) => {
  const before = await version();
  const cases: Array<[string, unknown, RegExp]> = [
    ['Upper-Case', { url: 'http://127.0.0.1:9/mcp' }, /^name: must be 1 to 63 lower-case/],
    ['-dash-first', { url: 'http://127.0.0.1:9/mcp' }, /^name: /],
    [uniqueName(), { url: 'ftp://tools.example/mcp' }, /^url: must start with http/],
    [uniqueName(), { url: 'https://user:pw@tools.example/mcp' }, /^url: must not contain a user name or password/],
    [uniqueName(), { url: 'https://tools.example/mcp?key=1' }, /^url: must not contain a query/],
    [uniqueName(), { url: 'https:///mcp' }, /^url: must name a host right after the scheme/],
    [uniqueName(), {}, /^url: is required/],
    [uniqueName(), { url: 'http://127.0.0.1:9/mcp', timeoutMs: 50 }, /^timeoutMs: must be an integer from 100 to 600000/],
    [uniqueName(), { url: 'http://127.0.0.1:9/mcp', callMicros: 1.5 }, /^callMicros: must be an integer/],
    [uniqueName(), { url: 'http://127.0.0.1:9/mcp', callMicros: '15' }, /^callMicros: must be an integer/],
    [uniqueName(), { url: 'http://127.0.0.1:9/mcp', apiKey: 'has spaces in it' }, /^apiKey: must be 1 to 4096 printable/],
    [uniqueName(), { url: 'http://127.0.0.1:9/mcp', colour: 'red' }, /^colour: unknown field/],
  ];
  for (const [name, body, message] of cases) {
    const res = await call('PUT', `/api/v1/tool-servers/${encodeURIComponent(name)}`, body);
    t.equal(res.statusCode, 400, `${name} ${JSON.stringify(body)}`);
    t.equal(errorOf(res).code, 'ZN_ERR_CP_INVALID_REQUEST');
    t.match(errorOf(res).message, message);
    t.notOk(res.body.includes('has spaces in it'), 'a refused key is not quoted');
  }
  t.equal(await version(), before, 'no version was recorded');
});

t.test("the server's key is sealed at rest, kept across puts that omit it, and never returned or logged", async (t) => {
  const secret = `mcp-key-${randomBytes(18).toString('hex')}`;
  const name = uniqueName();
  const responses: string[] = [];
  const put = async (body: unknown, status: number): Promise<Mutation> => {
    const res = await call('PUT', `/api/v1/tool-servers/${name}`, body);
    responses.push(res.body);
    return expectStatus<Mutation>(res, status);
  };
  const created = await put({ url: 'http://127.0.0.1:9/mcp', apiKey: `${secret}\n` }, 201);
  t.equal(created.toolServer.hasApiKey, true);
  const { rows } = await pool.query<{ secret_encrypted: Buffer; row: string }>('select secret_encrypted, t::text as row from tool_servers t where id = $1', [created.toolServer.id]);
  const sealed = rows[0]!.secret_encrypted;
  t.notOk(rows[0]!.row.includes(secret), 'no column holds the key in clear');
  t.equal(openToolServerSecret(secretBox!, created.toolServer.id, sealed), secret, 'it opens to the (trimmed) key');
  t.throws(() => secretBox!.open(sealed, toolServerSecretContext('another-server')), 'it is bound to its server id');

  t.equal((await put({ url: 'http://127.0.0.1:9/mcp2' }, 200)).toolServer.hasApiKey, true, 'a put without apiKey keeps the key');
  for (const url of ['/api/v1/tool-servers', `/api/v1/tool-servers/${name}`]) responses.push((await call('GET', url)).body);
  t.equal((await put({ url: 'http://127.0.0.1:9/mcp2', apiKey: null }, 200)).toolServer.hasApiKey, false, 'apiKey null removes it');
  const { rows: after } = await pool.query<{ secret_encrypted: Buffer | null }>('select secret_encrypted from tool_servers where id = $1', [created.toolServer.id]);
  t.equal(after[0]?.secret_encrypted, null);

  t.notOk(responses.some((body) => body.includes(secret)), 'no response carries the key');
  t.notOk(log.text().includes(secret), 'no log line carries the key');
});

t.test('without a secret box a key cannot be stored, and nothing is written', async (t) => {
  const bare = await configApp(t, db.url, { secretBox: false });
  const name = uniqueName();
  const res = await bare.call('PUT', `/api/v1/tool-servers/${name}`, { url: 'http://127.0.0.1:9/mcp', apiKey: 'mcp-key-1234' });
  t.equal(res.statusCode, 503);
  t.equal(errorOf(res).code, 'ZN_ERR_CP_SECRETS_UNAVAILABLE');
  t.equal((await call('GET', `/api/v1/tool-servers/${name}`)).statusCode, 404);
});

t.test('the admin API needs the admin token', async (t) => {
  const { app } = await configApp(t, db.url);
  const res = await app.inject({ method: 'GET', url: '/api/v1/tool-servers' });
  t.equal(res.statusCode, 401);
});

t.test("the fleet config nodes get carries each live server with its key, and the publisher's bytes agree", async (t) => {
  const secret = `mcp-key-${randomBytes(18).toString('hex')}`;
  const name = uniqueName();
  const gone = uniqueName();
  expectStatus(await call('PUT', `/api/v1/tool-servers/${name}`, { url: 'http://127.0.0.1:9/mcp', apiKey: secret, timeoutMs: 7000, callMicros: 42 }), 201);
  expectStatus(await call('PUT', `/api/v1/tool-servers/${gone}`, { url: 'http://127.0.0.1:9/gone' }), 201);
  expectStatus(await call('DELETE', `/api/v1/tool-servers/${gone}`), 200);

  const fleet = await readFleetConfig(pool, secretBox!);
  t.same(fleet.toolServers.find((s) => s.name === name), { name, url: 'http://127.0.0.1:9/mcp', apiKey: secret, timeoutMs: 7000, callMicros: 42 });
  t.notOk(fleet.toolServers.some((s) => s.name === gone), 'a deleted server is not shipped');

  const node: BundleNode = { nodeId: 'node-1', nodeName: 'edge-1', node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 0, fullPolicy: 'reject' } } };
  const issuedAt = new Date();
  const bundle = assembleBundle(7, node, fleet, issuedAt);
  t.ok(configBundleSchema.safeParse(bundle).success, 'a valid bundle');
  const spliced = spliceBundle(7, node, renderFleet(7, fleet), issuedAt).toString('utf8');
  t.equal(spliced, canonicalJson(bundle), 'the publisher ships the same bytes, tool servers included');
});
