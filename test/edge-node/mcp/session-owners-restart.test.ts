// MCP session ownership outlives the node: a node serving from its state dir (the services `serve`
// opens) binds a session to the key that opened it; after the node restarts on the same state dir,
// and on a second node sharing it as a replica does, another key presenting that session id is
// refused with ZN_ERR_TOOL_SESSION_NOT_FOUND and the tool server never sees the call. A session the
// node cannot bind to its caller (an id another key holds, a locked file) is not handed out.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import { buildApp } from '../../../edge-node/src/app.js';
import { noCredit } from '../../../edge-node/src/billing/credit-leases.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { openNodeServices } from '../../../edge-node/src/cli/node-services.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { SESSION_OWNER_FILE } from '../../../edge-node/src/providers/mcp/sqlite-session-owner-store.js';
import { openStateStore } from '../../../edge-node/src/state/state-store.js';
import { startFakeToolServer } from '../../fixtures/fake-tool-server.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';

const TOOL_KEY = 'mcp-tool-server-key-for-tests-0042';
const keyA = newCallerKey();
const keyB = newCallerKey();
const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };
const echo = (text: string, id: number): unknown => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'echo', arguments: { text } } });

interface RunningNode {
  url: string;
  stop(): Promise<void>;
}

/** A node on the state dir `dir` with the services `serve` opens there (credit off: not what this is about), one of its replicas: a test starts two. */
async function startNode(t: Test, dir: string, toolServerUrl: string): Promise<RunningNode> {
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-a', keyA.sha256), bundleKey('key-b', keyB.sha256)],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: TOOL_KEY, timeoutMs: 10_000, callMicros: 0 }],
  });
  const holder = ConfigHolder.ready(fromBundle(bundle));
  const logger = createLogger({ level: 'silent' });
  const services = await openNodeServices({ stateDir: dir, nodeId: bundle.nodeId, holder, logger, env: { ZENOVA_NODE_REPLICAS: '2' }, creditPolicy: DEFAULT_CREDIT_POLICY, spoolSynchronous: 'normal', adminListen: undefined });
  const app = await buildApp({ holder, logger, services: { ...services.pipeline, credit: noCredit } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    await app.close();
    await services.close();
  };
  t.teardown(stop);
  return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, stop };
}

async function post(url: string, body: unknown, headers: Record<string, string>): Promise<{ status: number; code: unknown; sessionId: string | null }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  const json = text.length > 0 && (res.headers.get('content-type') ?? '').startsWith('application/json') ? (JSON.parse(text) as { error?: { code?: unknown } }) : {};
  return { status: res.status, code: json.error?.code, sessionId: res.headers.get('mcp-session-id') };
}

const bearer = (key: { secret: string }): Record<string, string> => ({ authorization: `Bearer ${key.secret}` });

/** initialize + initialized as key A on `url`; the session headers (without a key). */
async function openSession(t: Test, url: string): Promise<Record<string, string>> {
  const init = await post(url, initialize, bearer(keyA));
  t.equal(init.status, 200, 'initialize answered');
  t.ok(init.sessionId, 'the tool server named a session');
  const session = { 'mcp-session-id': init.sessionId ?? '', 'mcp-protocol-version': '2025-06-18' };
  t.equal((await post(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, { ...bearer(keyA), ...session })).status, 202, 'initialized accepted');
  return session;
}

t.test("after a restart the node refuses key B on key A's session with ZN_ERR_TOOL_SESSION_NOT_FOUND", async (t) => {
  const dir = (await openStateStore(t.testdir(), { create: true })).dir;
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY, jsonResponse: true });
  const before = await startNode(t, dir, fake.url);
  const session = await openSession(t, before.url);
  await before.stop();

  const after = await startNode(t, dir, fake.url);
  const seen = fake.requests.length;
  const stolen = await post(after.url, echo('from key B', 2), { ...bearer(keyB), ...session });
  t.equal(stolen.status, 404, 'key B is refused with 404');
  t.equal(stolen.code, 'ZN_ERR_TOOL_SESSION_NOT_FOUND', 'with the session code');
  t.equal(fake.requests.length, seen, 'the tool server never saw key B on that session');
  t.equal((await post(after.url, echo('from key A', 3), { ...bearer(keyA), ...session })).status, 200, 'key A keeps its session');
  t.same(fake.toolCalls, [{ tool: 'echo', args: { text: 'from key A' } }], 'only key A called a tool');
});

t.test("a second node on the same state dir (as a replica is) refuses key B on a session key A opened on the first", async (t) => {
  const dir = (await openStateStore(t.testdir(), { create: true })).dir;
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY, jsonResponse: true });
  const first = await startNode(t, dir, fake.url);
  const second = await startNode(t, dir, fake.url);
  const session = await openSession(t, first.url);
  const stolen = await post(second.url, echo('from key B', 2), { ...bearer(keyB), ...session });
  t.equal(stolen.code, 'ZN_ERR_TOOL_SESSION_NOT_FOUND', 'the other node refuses key B');
  t.equal((await post(second.url, echo('from key A', 3), { ...bearer(keyA), ...session })).status, 200, 'key A uses it through either');
});

/**
 * A tool server that names the same session in every answer (it sees only the node's key, so it
 * cannot tell callers apart). With `sse`, it answers as an event stream that stays open (pings).
 */
async function fixedSessionToolServer(t: Test, sse = false): Promise<{ url: string; calls: () => number; deletes: () => number; closedStreams: () => number }> {
  let calls = 0;
  let deletes = 0;
  let closedStreams = 0;
  const answer = JSON.stringify({ jsonrpc: '2.0', id: 1, result: { protocolVersion: '2025-06-18', capabilities: {}, serverInfo: { name: 'fixed', version: '1' } } });
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      calls += 1;
      if (req.method === 'DELETE') deletes += 1;
      if (!sse) {
        res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'the-one-session' }).end(answer);
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', 'mcp-session-id': 'the-one-session' });
      res.write(`event: message\ndata: ${answer}\n\n`);
      const ping = setInterval(() => res.write(': ping\n\n'), 50);
      res.on('close', () => {
        clearInterval(ping);
        closedStreams += 1;
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, calls: () => calls, deletes: () => deletes, closedStreams: () => closedStreams };
}

t.test("a tool server that opens a session with an id another key holds: the id is not handed to the second key, and the first keeps it", async (t) => {
  const dir = (await openStateStore(t.testdir(), { create: true })).dir;
  const tool = await fixedSessionToolServer(t);
  const node = await startNode(t, dir, tool.url);
  const first = await post(node.url, initialize, bearer(keyA));
  t.equal(first.sessionId, 'the-one-session', 'key A gets its session');
  const second = await post(node.url, initialize, bearer(keyB));
  t.equal(second.status, 502);
  t.equal(second.code, 'ZN_ERR_TOOL_SESSION_CONFLICT');
  t.equal(second.sessionId, null, 'key B is not given the id');
  const session = { 'mcp-session-id': 'the-one-session' };
  t.equal((await post(node.url, echo('from key B', 2), { ...bearer(keyB), ...session })).code, 'ZN_ERR_TOOL_SESSION_NOT_FOUND', 'nor may it use it');
  t.equal((await post(node.url, echo('from key A', 3), { ...bearer(keyA), ...session })).status, 200, 'key A keeps its session');
  t.equal((await post(node.url, initialize, bearer(keyA))).sessionId, 'the-one-session', 'key A may open it again');
});

t.test("a refused initialize answered as an event stream that stays open: the node closes that stream instead of keeping the tool server's connection", async (t) => {
  const dir = (await openStateStore(t.testdir(), { create: true })).dir;
  const tool = await fixedSessionToolServer(t, true);
  const node = await startNode(t, dir, tool.url);
  const opened = await fetch(node.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...bearer(keyA) }, body: JSON.stringify(initialize) });
  t.equal(opened.headers.get('mcp-session-id'), 'the-one-session', 'key A gets its session (its stream stays open)');
  const refused = await post(node.url, initialize, bearer(keyB));
  t.equal(refused.code, 'ZN_ERR_TOOL_SESSION_CONFLICT');
  await waitFor(() => tool.closedStreams() >= 1 || undefined, { what: "the refused answer's stream closed at the tool server", timeoutMs: 5_000 });
  t.equal(tool.closedStreams(), 1, "only the refused one: key A's stream is still open");
  await opened.body?.cancel();
});

t.test('a session the node cannot record (its session file locked) is not handed out: initialize gets a retryable 503 and the node ends that session at the tool server', async (t) => {
  const dir = (await openStateStore(t.testdir(), { create: true })).dir;
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY, jsonResponse: true });
  const node = await startNode(t, dir, fake.url);
  // Another process holds the write lock (a backup, an operator's shell).
  const holder = new Database(path.join(dir, SESSION_OWNER_FILE));
  t.teardown(() => holder.close());
  holder.prepare('BEGIN IMMEDIATE').run();
  const refused = await post(node.url, initialize, bearer(keyA));
  t.equal(refused.status, 503);
  t.equal(refused.code, 'ZN_ERR_TOOL_SESSION_UNAVAILABLE');
  t.equal(refused.sessionId, null, 'no id the node would then refuse');
  // The session the tool server opened for it is ended there, not left to expire.
  await waitFor(() => (fake.requests.some((r) => r.method === 'DELETE') && fake.sessions() === 0) || undefined, { what: 'the unrecorded session ended at the tool server', timeoutMs: 5_000 });
  holder.prepare('COMMIT').run();
  await openSession(t, node.url);
});

t.test("an initialize the node cannot record, for an id another key holds, does not end that key's session", async (t) => {
  const dir = (await openStateStore(t.testdir(), { create: true })).dir;
  const tool = await fixedSessionToolServer(t);
  const node = await startNode(t, dir, tool.url);
  t.equal((await post(node.url, initialize, bearer(keyB))).sessionId, 'the-one-session', 'key B holds the id');
  const holder = new Database(path.join(dir, SESSION_OWNER_FILE));
  t.teardown(() => holder.close());
  holder.prepare('BEGIN IMMEDIATE').run();
  // The tool server gives key A the same id; the node cannot write (locked), and the id is B's.
  t.equal((await post(node.url, initialize, bearer(keyA))).code, 'ZN_ERR_TOOL_SESSION_UNAVAILABLE');
  holder.prepare('COMMIT').run();
  const before = tool.calls();
  t.equal((await post(node.url, echo('from key B', 2), { ...bearer(keyB), 'mcp-session-id': 'the-one-session' })).status, 200, "key B's session still works");
  await waitFor(() => tool.calls() > before || undefined, { what: "key B's call at the tool server" });
  t.equal(tool.deletes(), 0, 'no DELETE was sent for it');
});
