// A call on an existing MCP session whose binding the node cannot read (an I/O error on
// mcp-sessions.sqlite) is a retryable 503 that tells the client to retry the call on its session,
// with a Retry-After as the node's other retryable refusals carry, not to start a new session.
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { MemorySessionOwnerStore } from '../../../edge-node/src/providers/mcp/session-owner-store.js';
import { SessionOwners } from '../../../edge-node/src/providers/mcp/session-owners.js';
import { startFakeToolServer } from '../../fixtures/fake-tool-server.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';

const TOOL_KEY = 'mcp-tool-server-key-for-tests-0042';
const caller = newCallerKey();

t.test('a call whose session binding cannot be read is told to retry the call on its session, after Retry-After', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY, jsonResponse: true });
  const store = new MemorySessionOwnerStore();
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [bundleKey('key-a', caller.sha256)],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: fake.url, apiKey: TOOL_KEY, timeoutMs: 10_000, callMicros: 0 }],
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: bundle.nodeId, sessionOwners: new SessionOwners(store) } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`;
  const post = (body: unknown, headers: Record<string, string> = {}): Promise<Response> => fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body: JSON.stringify(body),
  });
  const opened = await post({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } });
  const sessionId = opened.headers.get('mcp-session-id');
  t.ok(sessionId, 'the session is opened and bound');
  await opened.text();
  store.get = () => {
    throw new Error('SQLITE_IOERR: disk I/O error');
  };

  const refused = await post({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'echo', arguments: { text: 'hi' } } }, { 'mcp-session-id': sessionId!, 'mcp-protocol-version': '2025-06-18' });
  t.equal(refused.status, 503);
  t.equal(refused.headers.get('retry-after'), '1', 'a retryable 503 says when to retry');
  const body = (await refused.json()) as { error: { code: string; message: string } };
  t.equal(body.error.code, 'ZN_ERR_TOOL_SESSION_UNAVAILABLE');
  t.match(body.error.message, /could not read which API key this MCP session belongs to; retry the call with the same Mcp-Session-Id/);
  t.notMatch(body.error.message, /initialize/, 'not told to open a new session');
});
