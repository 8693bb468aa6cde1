// Concurrency limits and MCP GET event streams: an open GET stream (the SDK opens one per session by
// itself) is a push channel, not work in progress, so it frees its concurrency slot once its head is
// relayed and a key with `concurrentRequests: N` can run N sessions. Open GET streams have a limit
// of their own (N per key), and a tool server's Retry-After on its 429 reaches the caller. A limit
// a new config sets counts the GET streams already open.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t from 'tap';
import type { Test } from 'tap';
import type { ConfigBundle } from '../../proto/src/index.js';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { MemoryLimitStore } from '../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../edge-node/src/rate-limit/node-rate-limiter.js';
import type { RequestSpool } from '../../edge-node/src/spool/request-spool.js';
import { startFakeToolServer } from '../fixtures/fake-tool-server.js';
import { waitFor } from '../fixtures/wait-for.js';
import { ACCOUNT_ID, bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { postInitialize, startOneSessionToolServer } from './mcp-get-stream-fixtures.js';

const TOOL_KEY = 'mcp-tool-server-key-for-tests-0042';
const caller = newCallerKey();
const spool: RequestSpool = { open: () => undefined, finalise: async () => undefined, keepsBodies: () => true, fullness: () => 0 };

async function startNode(t: Test, toolServerUrl: string, concurrentRequests: number): Promise<string> {
  const bundle: ConfigBundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-mcp', caller.sha256, { limits: { concurrentRequests } })],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: TOOL_KEY, timeoutMs: 10_000, callMicros: 0 }],
  });
  const logger = createLogger({ level: 'silent' });
  const limiter = new NodeRateLimiter(new MemoryLimitStore(), logger);
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger, services: { nodeId: bundle.nodeId, spool, limiter } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`;
}

const auth = { authorization: `Bearer ${caller.secret}` };

t.test('a key with concurrentRequests N runs N SDK sessions, each with its open GET event stream', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const url = await startNode(t, fake.url, 2);
  for (let i = 1; i <= 2; i += 1) {
    const client = new Client({ name: 'zenova-test', version: '1.0.0' });
    client.onerror = () => undefined;
    t.teardown(() => client.close());
    await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: auth } }));
    await waitFor(() => fake.requests.filter((r) => r.method === 'GET').length === i, { what: `the GET stream of session ${i}` });
    const listed = await client.listTools();
    t.ok(listed.tools.length > 0, `session ${i} lists tools while the GET streams stay open`);
  }
});

t.test('open GET event streams are limited to concurrentRequests per key, and a closed one frees its place', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const url = await startNode(t, fake.url, 1);
  const init = await postInitialize(url, auth);
  const session = init.headers.get('mcp-session-id')!;
  await init.text();
  const get = (signal?: AbortSignal): Promise<Response> => fetch(url, { headers: { ...auth, accept: 'text/event-stream', 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' }, signal });
  const first = new AbortController();
  const open = await get(first.signal);
  t.equal(open.status, 200, 'the first GET stream opens');
  const second = await get();
  t.equal(second.status, 429, 'a second one is refused');
  t.match(await second.json(), { error: { code: 'ZN_ERR_CONCURRENCY_LIMITED' } });
  t.equal(second.headers.get('retry-after'), '1');
  first.abort();
  const again = new AbortController();
  t.teardown(() => again.abort());
  const reopened = await waitFor(async () => {
    const res = await get(again.signal);
    if (res.status === 200) return res;
    await res.text();
    return undefined;
  }, { what: 'a GET stream once the first is closed' });
  t.equal(reopened.status, 200, 'once the first is closed another opens');
});

t.test("a tool server's 429 reaches the caller with its Retry-After", async (t) => {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '17' }).end('{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"slow down"}}'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const url = await startNode(t, `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, 4);
  const res = await fetch(url, { method: 'POST', headers: { ...auth, 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }) });
  t.equal(res.status, 429);
  t.equal(res.headers.get('retry-after'), '17');
  await res.text();
});

/** A tool server with one session whose GET streams stay open until the test ends. */
function heldGetServer(t: Test, session: string): Promise<string> {
  return startOneSessionToolServer(t, session, (res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(': open\n\n');
  });
}

for (const { scope, before, after } of [
  { scope: 'key', before: { keyLimits: {}, accountLimits: {} }, after: { keyLimits: { concurrentRequests: 1 }, accountLimits: {} } },
  { scope: 'account', before: { keyLimits: { concurrentRequests: 3 }, accountLimits: {} }, after: { keyLimits: {}, accountLimits: { concurrentRequests: 2 } } },
]) {
  t.test(`a concurrentRequests limit a new config sets on the ${scope} counts the GET streams already open`, async (t) => {
    const session = `sess-limit-${scope}`;
    const toolUrl = await heldGetServer(t, session);
    const bundleOf = (version: number, limits: { keyLimits: Record<string, number>; accountLimits: Record<string, number> }): ConfigBundle => testBundle({
      nodeId: 'node-mcp', version, upstreamUrl: 'http://127.0.0.1:9/v1',
      keys: [bundleKey('key-mcp', caller.sha256, { limits: limits.keyLimits })],
      accounts: [{ id: ACCOUNT_ID, name: 'acme', status: 'active', limits: limits.accountLimits }],
      node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
      toolServers: [{ name: 'tools', url: toolUrl, apiKey: TOOL_KEY, timeoutMs: 10_000, callMicros: 0 }],
    });
    const holder = ConfigHolder.ready(fromBundle(bundleOf(1, before)));
    const logger = createLogger({ level: 'silent' });
    const app = await buildApp({ holder, logger, services: { nodeId: 'node-mcp', spool, limiter: new NodeRateLimiter(new MemoryLimitStore(), logger) } });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const streams = new AbortController();
    t.teardown(async () => {
      streams.abort();
      await app.close();
    });
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`;
    const init = await postInitialize(url, auth);
    t.equal(init.status, 200);
    await init.text();
    const get = (signal?: AbortSignal): Promise<Response> => fetch(url, { headers: { ...auth, accept: 'text/event-stream', 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' }, signal });

    const open = [await get(streams.signal), await get(streams.signal)];
    t.same(open.map((r) => r.status), [200, 200], '2 GET streams open under the first config');
    holder.swap(fromBundle(bundleOf(2, after)));
    const refused = await get(streams.signal);
    t.equal(refused.status, 429, `with 2 GET streams open and the ${scope}'s new limit of ${scope === 'key' ? 1 : 2}, a new GET is refused`);
    // A GET that was let in is a stream that stays open: not read here (the teardown ends it).
    if (refused.status === 429) t.match(await refused.json(), { error: { code: 'ZN_ERR_CONCURRENCY_LIMITED' } });
  });
}
