// A tool server that answers a POST with an event stream and then fails mid-stream (goes quiet past
// its timeoutMs, resets the connection): each request of the POST still unanswered gets a JSON-RPC
// error naming the node's code and the stream ends normally, so an MCP client's pending call fails
// when the node knows, not at its own request timeout (the official SDK's: 60 s); the record says
// failed with that code. With and without output guardrails (the guard sits before the hold).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import t from 'tap';
import type { Test } from 'tap';
import type { GuardrailPolicy, RequestRecord } from '../../proto/src/index.js';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { policy } from './guardrails/guardrail-fixtures.js';

const caller = newCallerKey();
const SESSION = 'sess-stream-failure';
/** The tool server's timeoutMs: how long the node waits between its events. */
const TOOL_TIMEOUT_MS = 300;
/** The client's own request timeout: the call must fail well before it. */
const CLIENT_TIMEOUT_MS = 5000;
const MASK_OUTPUT_EMAILS: GuardrailPolicy['rules'] = [{ detector: 'email', action: 'mask', on: 'output' }];

type Failure = 'stall' | 'reset';

function sse(message: unknown): string {
  return `event: message\ndata: ${JSON.stringify(message)}\n\n`;
}

/**
 * A tool server that opens sessions with JSON answers and answers every other request POST with an
 * event stream: a log notification, an answer to the batch's first request when it has several,
 * then `failure` (silence, or the connection reset).
 */
async function failingToolServer(t: Test, failure: Failure): Promise<string> {
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      if (req.method !== 'POST') {
        res.writeHead(405).end();
        return;
      }
      const parsed = JSON.parse(body) as { id?: number; method: string } | Array<{ id?: number; method: string }>;
      const messages = Array.isArray(parsed) ? parsed : [parsed];
      const first = messages[0]!;
      if (first.method === 'initialize') {
        res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': SESSION });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: first.id, result: { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'failing', version: '1' } } }));
        return;
      }
      if (first.id === undefined) {
        res.writeHead(202).end();
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      let events = sse({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'working for ops@example.com' } });
      if (messages.length > 1) events += sse({ jsonrpc: '2.0', id: first.id, result: { content: [{ type: 'text', text: 'first done' }] } });
      // Part of an event that never ends: it must not reach the caller ahead of the error answers.
      res.write(`${events}event: message\ndata: {"jsonrpc":"2.0",`, () => {
        if (failure === 'reset') res.socket?.resetAndDestroy();
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
}

async function startNode(t: Test, toolServerUrl: string, rules?: GuardrailPolicy['rules']): Promise<{ url: string; records: RequestRecord[] }> {
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 1, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-mcp', caller.sha256, rules === undefined ? {} : { guardrailPolicyId: 'p' })],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: null, timeoutMs: TOOL_TIMEOUT_MS, callMicros: 0 }],
    ...(rules === undefined ? {} : { guardrailPolicies: [policy('p', rules)] }),
  });
  const records: RequestRecord[] = [];
  const app = await buildApp({
    holder: ConfigHolder.ready(fromBundle(bundle)),
    logger: createLogger({ level: 'silent' }),
    services: { nodeId: bundle.nodeId, spool: { open: () => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 } },
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, records };
}

const CASES: Array<{ failure: Failure; code: string }> = [
  { failure: 'stall', code: 'ZN_ERR_UPSTREAM_TIMEOUT' },
  { failure: 'reset', code: 'ZN_ERR_UPSTREAM_UNAVAILABLE' },
];

for (const { failure, code } of CASES) {
  for (const guarded of [false, true]) {
    const under = guarded ? ' under output guardrails' : '';

    t.test(`a tools/call whose event stream the tool server fails (${failure}) is rejected by the SDK at once with ${code}${under}`, async (t) => {
      const node = await startNode(t, await failingToolServer(t, failure), guarded ? MASK_OUTPUT_EMAILS : undefined);
      const client = new Client({ name: 'stream-failure-test', version: '1' });
      client.onerror = () => undefined;
      await client.connect(new StreamableHTTPClientTransport(new URL(node.url), { requestInit: { headers: { authorization: `Bearer ${caller.secret}` } } }));
      t.teardown(() => client.close());

      const started = Date.now();
      const error = await client.callTool({ name: 'slow', arguments: {} }, undefined, { timeout: CLIENT_TIMEOUT_MS }).then(
        () => undefined,
        (err: unknown) => err,
      );
      const tookMs = Date.now() - started;
      t.ok(error instanceof McpError, `callTool rejected with an McpError (got ${String(error)})`);
      const rpc = error as McpError;
      t.equal(rpc.code, -32000, 'the JSON-RPC error code is the one the node answers with');
      t.same(rpc.data, { code }, "the error's data names the node's code");
      t.ok(tookMs < CLIENT_TIMEOUT_MS / 2, `it failed when the node knew, not at the client's own timeout (${tookMs} ms)`);

      const record = await waitFor(() => node.records.find((r) => r.upstreamModel === 'tools/call'), { what: "the tools/call's record" });
      t.equal(record.status, 'failed', 'the record says failed');
      t.equal(record.errorCode, code, 'with the failure');
      t.equal(record.httpStatus, 200, 'and the status whose head went out');
    });

    t.test(`a batch whose event stream fails (${failure}) ends normally with an error only for the request not answered yet${under}`, async (t) => {
      const node = await startNode(t, await failingToolServer(t, failure), guarded ? MASK_OUTPUT_EMAILS : undefined);
      const batch = [
        { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'fast', arguments: {} } },
        { jsonrpc: '2.0', id: 'two', method: 'tools/call', params: { name: 'slow', arguments: {} } },
      ];
      const opened = await fetch(node.url, {
        method: 'POST',
        headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }),
      });
      await opened.arrayBuffer();
      const session = opened.headers.get('mcp-session-id');
      t.equal(session, SESSION, 'the session is open');

      const streamed = await fetch(node.url, {
        method: 'POST',
        headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': session! },
        body: JSON.stringify(batch),
      });
      t.equal(streamed.status, 200, 'the head went out before the failure');
      // text() rejects when the body is cut rather than ended.
      const text = await streamed.text();
      const events = text.split('\n\n').filter((event) => event.length > 0);
      const messages = events.map((event) => JSON.parse(event.split('\n').find((line) => line.startsWith('data: '))!.slice(6)) as Record<string, unknown>);
      t.equal(events.length, 3, 'the notification, the first answer and one error answer: nothing of the unfinished event');
      t.match(messages[0], { method: 'notifications/message' }, 'the notification was relayed');
      if (guarded) t.notOk(JSON.stringify(messages[0]).includes('ops@example.com'), 'masked by the output rules');
      t.match(messages[1], { id: 1, result: { content: [{ text: 'first done' }] } }, "the first request's own answer");
      t.same(messages[2], { jsonrpc: '2.0', id: 'two', error: { code: -32000, message: (messages[2]!.error as { message: string }).message, data: { code } } }, 'the request still pending gets the error');
      t.ok(text.endsWith('\n\n'), 'the stream ends after whole events');

      const record = await waitFor(() => node.records.find((r) => r.upstreamModel === 'batch'), { what: "the batch's record" });
      t.equal(record.status, 'failed', 'the record says failed');
      t.equal(record.errorCode, code, 'with the failure');
    });
  }
}
