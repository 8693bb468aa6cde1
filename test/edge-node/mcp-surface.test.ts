// The tools surface end to end: the official MCP SDK client (streamable HTTP, the caller's key in
// its request headers) through a listening node to a real MCP tool server. Initialize, tools/list
// and tools/call work in both answer modes (JSON and event stream); the tool server sees the
// node's key and never the caller's; missing key, unknown server, a server the key's
// allowedToolServers leave out and a node without the tools surface each get their own code; every
// call leaves one record in the spool.
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import t from 'tap';
import type { Test } from 'tap';
import type { ConfigBundle, RequestRecord } from '../../proto/src/index.js';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { MemoryLimitStore } from '../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../edge-node/src/rate-limit/node-rate-limiter.js';
import type { RateLimiter } from '../../edge-node/src/rate-limit/rate-limiter.js';
import type { OpenRow, RequestSpool } from '../../edge-node/src/spool/request-spool.js';
import { startFakeToolServer } from '../fixtures/fake-tool-server.js';
import type { FakeToolServer } from '../fixtures/fake-tool-server.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from './config-fixtures.js';

const TOOL_KEY = 'mcp-tool-server-key-for-tests-0042';
const caller = newCallerKey();

interface RecordingSpool extends RequestSpool {
  opened: OpenRow[];
  records: RequestRecord[];
}

function recordingSpool(): RecordingSpool {
  const opened: OpenRow[] = [];
  const records: RequestRecord[] = [];
  return {
    opened,
    records,
    open: (row) => void opened.push(row),
    finalise: async (record) => void records.push(record),
    keepsBodies: () => true,
    fullness: () => 0,
  };
}

function bundleFor(servers: Array<{ name: string; url: string }>, surfaces: ConfigBundle['node']['surfaces'] = ['model', 'tools']): ConfigBundle {
  return testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [bundleKey('key-mcp', caller.sha256)],
    node: { surfaces, spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: servers.map((s) => ({ ...s, apiKey: TOOL_KEY, timeoutMs: 10_000, callMicros: 25 })),
  });
}

/** A node on 127.0.0.1:0 serving `bundle`, its spool recorded; returns its origin. */
async function startNode(t: Test, bundle: ConfigBundle, spool: RequestSpool, services: { limiter?: RateLimiter } = {}): Promise<string> {
  const logger = createLogger({ level: 'silent' });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger, services: { nodeId: bundle.nodeId, spool, ...services } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

/** An SDK client connected (initialize done) to `url`, with the caller's key in its headers. */
async function connect(t: Test, url: string, headers: Record<string, string> = { authorization: `Bearer ${caller.secret}` }): Promise<Client> {
  const client = new Client({ name: 'zenova-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  t.teardown(() => client.close());
  await client.connect(transport);
  return client;
}

async function post(url: string, body: unknown, headers: Record<string, string>): Promise<{ status: number; code: string | undefined; requestId: string | null }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers }, body: JSON.stringify(body) });
  const json = (await res.json()) as { error?: { code?: string } };
  return { status: res.status, code: json.error?.code, requestId: res.headers.get('x-request-id') };
}

const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };

function assertToolServerSawOnlyTheNodeKey(t: Test, fake: FakeToolServer): void {
  t.ok(fake.requests.length > 0, 'the tool server was called');
  t.ok(fake.requests.every((r) => r.headers.authorization === `Bearer ${TOOL_KEY}`), "every call carried the node's key for the tool server");
  t.notOk(fake.requests.some((r) => JSON.stringify(r.headers).includes(caller.secret)), "the caller's key never reached the tool server");
}

for (const jsonResponse of [true, false]) {
  t.test(`the SDK client lists and calls tools through the node (tool server answering with ${jsonResponse ? 'JSON' : 'event streams'})`, async (t) => {
    const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY, jsonResponse });
    const spool = recordingSpool();
    const origin = await startNode(t, bundleFor([{ name: 'tools', url: fake.url }]), spool);
    const client = await connect(t, `${origin}/mcp/tools`);
    t.equal(client.getServerVersion()?.name, 'fake-tools', 'initialize reached the tool server');

    const listed = await client.listTools();
    t.same(listed.tools.map((tool) => tool.name).sort(), ['add', 'echo']);
    const echoed = await client.callTool({ name: 'echo', arguments: { text: 'through the node' } });
    t.same(echoed.content, [{ type: 'text', text: 'echo: through the node' }]);
    const added = await client.callTool({ name: 'add', arguments: { a: 2, b: 40 } });
    t.same(added.content, [{ type: 'text', text: '42' }]);
    t.same(fake.toolCalls, [{ tool: 'echo', args: { text: 'through the node' } }, { tool: 'add', args: { a: 2, b: 40 } }]);
    assertToolServerSawOnlyTheNodeKey(t, fake);

    const calls = (): RequestRecord[] => spool.records.filter((r) => r.upstreamModel === 'tools/call');
    await waitFor(() => calls().length === 2, { what: 'a record for each tools/call' });
    for (const record of calls()) {
      t.match(record, {
        api: 'mcp', surface: 'tools', nodeId: 'node-mcp', configVersion: 5, keyId: 'key-mcp', model: 'tools',
        upstream: 'tools', upstreamModel: 'tools/call', status: 'ok', httpStatus: 200, errorCode: null,
      });
      t.match(record.attempts, [{ upstream: 'tools', model: 'tools/call', outcome: 'ok' }]);
    }
    const posts = fake.requests.filter((r) => r.method === 'POST').length;
    const postRecords = (): RequestRecord[] => spool.records.filter((r) => r.upstreamModel !== 'GET');
    await waitFor(() => postRecords().length >= posts, { what: 'a record per POST' });
    t.equal(postRecords().length, posts, 'exactly one record per POST the tool server saw');
    t.same(spool.records.filter((r) => r.upstreamModel === 'initialize').length, 1, 'initialize is recorded once');
    t.same(spool.records.filter((r) => r.upstreamModel === 'tools/list').length, 1, 'tools/list is recorded once');
  });
}

/** A node with one tool server, `tools`, and an MCP SDK client connected to it through the node (a session open). */
async function connectedThroughNode(t: Test) {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const origin = await startNode(t, bundleFor([{ name: 'tools', url: fake.url }]), recordingSpool());
  const client = new Client({ name: 'zenova-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${origin}/mcp/tools`), { requestInit: { headers: { authorization: `Bearer ${caller.secret}` } } });
  t.teardown(() => client.close());
  await client.connect(transport);
  return { fake, origin, client, transport };
}

t.test("the tool server's session survives across calls and DELETE ends it", async (t) => {
  const { fake, client, transport } = await connectedThroughNode(t);
  t.ok(transport.sessionId, 'the session id came back through the node');
  t.equal(fake.sessions(), 1);
  await client.listTools();
  await transport.terminateSession();
  await waitFor(() => fake.sessions() === 0, { what: 'the tool server to end the session' });
  t.pass('the session ended on the tool server');
});

t.test('a DELETE with an empty body labelled application/json ends the session: no body, not invalid JSON', async (t) => {
  const { fake, origin, transport } = await connectedThroughNode(t);
  t.equal(fake.sessions(), 1);
  const res = await fetch(`${origin}/mcp/tools`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${caller.secret}`, 'mcp-session-id': transport.sessionId!, 'mcp-protocol-version': '2025-06-18', 'content-type': 'application/json' },
    body: '',
  });
  t.equal(res.status, 200, await res.text());
  await waitFor(() => fake.sessions() === 0, { what: 'the tool server to end the session' });
  t.pass('the session ended on the tool server');
});

t.test("the tool server's unasked messages on the GET event stream reach the client while the stream stays open", async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const origin = await startNode(t, bundleFor([{ name: 'tools', url: fake.url }]), recordingSpool());
  const client = new Client({ name: 'zenova-test', version: '1.0.0' });
  let changes = 0;
  client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
    changes += 1;
  });
  const transport = new StreamableHTTPClientTransport(new URL(`${origin}/mcp/tools`), { requestInit: { headers: { authorization: `Bearer ${caller.secret}` } } });
  t.teardown(() => client.close());
  await client.connect(transport);
  await waitFor(() => fake.requests.some((r) => r.method === 'GET'), { what: 'the client to open its GET event stream through the node' });
  fake.addTool('later');
  await waitFor(() => changes === 1, { what: 'notifications/tools/list_changed to arrive through the open stream' });
  t.equal(changes, 1, 'the notification arrived before the stream ended');
  t.ok((await client.listTools()).tools.some((tool) => tool.name === 'later'), 'and the new tool is listed');
});

t.test('a call without a key is refused with ZN_ERR_API_KEY_MISSING and never reaches the tool server', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const spool = recordingSpool();
  const origin = await startNode(t, bundleFor([{ name: 'tools', url: fake.url }]), spool);
  const res = await post(`${origin}/mcp/tools`, initialize, {});
  t.equal(res.status, 401);
  t.equal(res.code, 'ZN_ERR_API_KEY_MISSING');
  t.ok(res.requestId, 'with an x-request-id');
  await t.rejects(connect(t, `${origin}/mcp/tools`, {}), { code: 401, message: /ZN_ERR_API_KEY_MISSING/ }, 'the SDK client sees the code too');
  t.equal(fake.requests.length, 0, 'the tool server was not called');
  await waitFor(() => spool.records.length === 2, { what: 'the refused calls recorded' });
  t.match(spool.records[0], { api: 'mcp', status: 'rejected', httpStatus: 401, errorCode: 'ZN_ERR_API_KEY_MISSING', keyId: null, upstream: null });
});

t.test('a server the node does not know is ZN_ERR_TOOL_SERVER_NOT_FOUND', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const origin = await startNode(t, bundleFor([{ name: 'tools', url: fake.url }]), recordingSpool());
  const res = await post(`${origin}/mcp/nope`, initialize, { authorization: `Bearer ${caller.secret}` });
  t.equal(res.status, 404);
  t.equal(res.code, 'ZN_ERR_TOOL_SERVER_NOT_FOUND');
  t.equal(fake.requests.length, 0);
});

t.test('an unknown server is refused before the rate limits: it spends none of the key\'s requests and never gets 429', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const limiter = new NodeRateLimiter(new MemoryLimitStore(), createLogger({ level: 'silent' }));
  t.teardown(() => limiter.close());
  // The key may make one request a minute.
  const base = bundleFor([{ name: 'tools', url: fake.url }]);
  const bundle = { ...base, apiKeys: base.apiKeys.map((k) => ({ ...k, limits: { requestsPerMinute: 1 } })) };
  const origin = await startNode(t, bundle, recordingSpool(), { limiter });
  const auth = { authorization: `Bearer ${caller.secret}` };
  for (const attempt of [1, 2]) {
    const res = await post(`${origin}/mcp/tols`, initialize, auth);
    t.equal(res.status, 404, `attempt ${attempt}`);
    t.equal(res.code, 'ZN_ERR_TOOL_SERVER_NOT_FOUND', `attempt ${attempt}: the typo is named, not a 429`);
  }
  // The tool server may answer initialize as an event stream: only the status is read.
  const known = await fetch(`${origin}/mcp/tools`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...auth }, body: JSON.stringify(initialize) });
  await known.body?.cancel();
  t.equal(known.status, 200, 'the known server is still admitted: the minute\'s one request was not spent');
  t.equal((await post(`${origin}/mcp/tools`, initialize, auth)).code, 'ZN_ERR_RATE_LIMITED', 'and the limit does hold');
  t.equal((await post(`${origin}/mcp/tols`, initialize, auth)).code, 'ZN_ERR_TOOL_SERVER_NOT_FOUND', 'an unknown server is still named once the limit is reached');
});

t.test('a node whose surfaces are only model refuses the tools surface with ZN_ERR_SURFACE_DISABLED', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const spool = recordingSpool();
  const origin = await startNode(t, bundleFor([{ name: 'tools', url: fake.url }], ['model']), spool);
  const res = await post(`${origin}/mcp/tools`, initialize, { authorization: `Bearer ${caller.secret}` });
  t.equal(res.status, 403);
  t.equal(res.code, 'ZN_ERR_SURFACE_DISABLED');
  await t.rejects(connect(t, `${origin}/mcp/tools`), { code: 403, message: /ZN_ERR_SURFACE_DISABLED/ });
  t.equal(fake.requests.length, 0, 'the tool server was not called');
  await waitFor(() => spool.records.length >= 1, { what: 'the refusal recorded' });
  t.match(spool.records[0], { surface: 'tools', status: 'rejected', httpStatus: 403, errorCode: 'ZN_ERR_SURFACE_DISABLED' });
});

t.test('a batch holding initialize with other messages is ZN_ERR_INVALID_REQUEST and never reaches the tool server (its calls could not be charged if the session were refused)', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const origin = await startNode(t, bundleFor([{ name: 'tools', url: fake.url }]), recordingSpool());
  const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'c', version: '1' } } };
  const call = { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'echo', arguments: { text: 'x' } } };
  const headers = { authorization: `Bearer ${caller.secret}`, accept: 'application/json, text/event-stream' };
  const res = await post(`${origin}/mcp/tools`, [initialize, call, { ...call, id: 3 }], headers);
  t.equal(res.status, 400);
  t.equal(res.code, 'ZN_ERR_INVALID_REQUEST');
  t.equal(fake.requests.length, 0);
});

t.test('a body that is not JSON-RPC is ZN_ERR_INVALID_REQUEST', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const origin = await startNode(t, bundleFor([{ name: 'tools', url: fake.url }]), recordingSpool());
  const res = await post(`${origin}/mcp/tools`, { hello: 'world' }, { authorization: `Bearer ${caller.secret}` });
  t.equal(res.status, 400);
  t.equal(res.code, 'ZN_ERR_INVALID_REQUEST');
  t.equal(fake.requests.length, 0);
});

t.test("a key whose allowedToolServers leave a server out is refused on POST, GET and DELETE with ZN_ERR_TOOL_SERVER_NOT_ALLOWED, before the tool server and the rate limits; a server on its list is served", async (t) => {
  const tools = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const mail = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const restricted = newCallerKey();
  const limiter = new NodeRateLimiter(new MemoryLimitStore(), createLogger({ level: 'silent' }));
  t.teardown(() => limiter.close());
  const spool = recordingSpool();
  const base = bundleFor([{ name: 'tools', url: tools.url }, { name: 'mail', url: mail.url }]);
  // The restricted key may make one request a minute, and only to `tools`.
  const bundle = { ...base, apiKeys: [...base.apiKeys, bundleKey('key-restricted', restricted.sha256, { allowedToolServers: ['tools'], limits: { requestsPerMinute: 1 } })] };
  const origin = await startNode(t, bundle, spool, { limiter });
  const auth = { authorization: `Bearer ${restricted.secret}` };
  const session = { 'mcp-session-id': 'sess-anything', 'mcp-protocol-version': '2025-06-18' };

  const requests: Array<[string, RequestInit]> = [
    ['POST', { method: 'POST', headers: { ...auth, 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: JSON.stringify(initialize) }],
    ['GET', { headers: { ...auth, ...session, accept: 'text/event-stream' } }],
    ['DELETE', { method: 'DELETE', headers: { ...auth, ...session } }],
  ];
  for (const [method, init] of requests) {
    const res = await fetch(`${origin}/mcp/mail`, init);
    const { error } = (await res.json()) as { error: { code: string; message: string } };
    t.equal(res.status, 403, `${method}: 403`);
    t.equal(error.code, 'ZN_ERR_TOOL_SERVER_NOT_ALLOWED', `${method}: the key may not use the server`);
    t.match(error.message, /tool server "mail"/, `${method}: the message names the server`);
  }
  const unknown = await post(`${origin}/mcp/nope`, initialize, auth);
  t.equal(unknown.code, 'ZN_ERR_TOOL_SERVER_NOT_ALLOWED', 'a server not on the list is refused whether or not it exists: the key learns nothing of others');
  t.equal(mail.requests.length, 0, 'the tool server the key may not use was never called');

  // The refusals spent none of the one request a minute: the server on the list is served.
  const allowed = await fetch(`${origin}/mcp/tools`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...auth }, body: JSON.stringify(initialize) });
  await allowed.body?.cancel();
  t.equal(allowed.status, 200, 'the server on its list is served');
  t.ok(tools.requests.some((r) => r.method === 'POST'), 'and reached');

  await waitFor(() => spool.records.filter((r) => r.keyId === 'key-restricted' && r.errorCode === 'ZN_ERR_TOOL_SERVER_NOT_ALLOWED').length === 4, { what: 'the refusals recorded' });
  for (const record of spool.records.filter((r) => r.errorCode === 'ZN_ERR_TOOL_SERVER_NOT_ALLOWED')) {
    t.match(record, { api: 'mcp', surface: 'tools', keyId: 'key-restricted', status: 'rejected', httpStatus: 403, upstream: null });
  }
});

t.test('a key whose allowedToolServers are null or absent reaches every tool server; an empty list reaches none', async (t) => {
  const tools = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const mail = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const explicitNull = newCallerKey();
  const none = newCallerKey();
  const base = bundleFor([{ name: 'tools', url: tools.url }, { name: 'mail', url: mail.url }]);
  const bundle = {
    ...base,
    apiKeys: [...base.apiKeys, bundleKey('key-null', explicitNull.sha256, { allowedToolServers: null }), bundleKey('key-none', none.sha256, { allowedToolServers: [] })],
  };
  const origin = await startNode(t, bundle, recordingSpool());
  for (const server of ['tools', 'mail']) {
    for (const [which, secret] of [['absent', caller.secret], ['null', explicitNull.secret]] as const) {
      const client = await connect(t, `${origin}/mcp/${server}`, { authorization: `Bearer ${secret}` });
      t.ok((await client.listTools()).tools.length > 0, `a key whose list is ${which} lists the tools of ${server}`);
    }
    await t.rejects(connect(t, `${origin}/mcp/${server}`, { authorization: `Bearer ${none.secret}` }), { code: 403, message: /ZN_ERR_TOOL_SERVER_NOT_ALLOWED/ },
      `the key with an empty list is refused ${server}, and the SDK client sees the code`);
  }
});
