// MCP guardrails and JSON that is not (all) a JSON-RPC message's params, result or error: a tool
// server's `{"detail": …}` error body, a bare JSON string, an array of strings, a top-level field
// beside a JSON-RPC answer, an event whose data is such JSON, and a caller's own extra top-level
// field. None of it may pass the rules unchecked: every string in it is checked, masked or blocking.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { Test } from 'tap';
import type { ConfigBundle, GuardrailPolicy } from '../../../proto/src/index.js';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';
import { policy } from './guardrail-fixtures.js';

const EMAIL = 'zhang.san@example.com';
const caller = newCallerKey();

interface ToolAnswer {
  status: number;
  type: string;
  body: string;
}

/** A tool server that answers every POST with `answer`, keeping the bodies it was sent. */
async function startToolServer(t: Test, answer: ToolAnswer): Promise<{ url: string; received: string[] }> {
  const received: string[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      received.push(Buffer.concat(chunks).toString('utf8'));
      res.writeHead(answer.status, { 'content-type': answer.type }).end(answer.body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, received };
}

async function startNode(t: Test, toolServerUrl: string, rules: GuardrailPolicy['rules']): Promise<string> {
  const bundle: ConfigBundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-guarded', caller.sha256, { guardrailPolicyId: 'p' })],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: 'tool-key-0123456789abcdef', timeoutMs: 10_000, callMicros: 0 }],
    guardrailPolicies: [policy('p', rules)],
  });
  const spool = { open: () => undefined, finalise: async () => undefined, keepsBodies: () => true, fullness: () => 0 };
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: bundle.nodeId, spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`;
}

const toolCall = { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'lookup', arguments: { q: 'x' } } };

/** The tool server answers `answer`; the caller POSTs `body` under a policy of one e-mail rule. */
async function exchange(t: Test, answer: ToolAnswer, action: 'mask' | 'block', on: 'input' | 'output' = 'output', body: unknown = toolCall) {
  const tools = await startToolServer(t, answer);
  const url = await startNode(t, tools.url, [{ detector: 'email', action, on }]);
  const res = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text(), received: tools.received };
}

const json = (status: number, value: unknown): ToolAnswer => ({ status, type: 'application/json', body: JSON.stringify(value) });
const events = (...data: string[]): ToolAnswer => ({ status: 200, type: 'text/event-stream', body: data.map((d) => `event: message\ndata: ${d}\n\n`).join('') });
const rpcAnswer = JSON.stringify({ jsonrpc: '2.0', id: 7, result: { content: [] } });

t.test('a tool server JSON error body that is not JSON-RPC has its strings masked under an output mask rule', async (t) => {
  const { status, text } = await exchange(t, json(404, { detail: `no user ${EMAIL}` }), 'mask');
  t.equal(status, 404, 'the tool server status is relayed');
  t.same(JSON.parse(text), { detail: 'no user [EMAIL]' });
});

t.test('a tool server JSON error body that is not JSON-RPC is blocked under an output block rule', async (t) => {
  const { status, text } = await exchange(t, json(404, { detail: `no user ${EMAIL}` }), 'block');
  t.equal(status, 400);
  t.match(text, /ZN_ERR_GUARDRAIL_BLOCKED/);
  t.notOk(text.includes(EMAIL));
});

t.test('a bare JSON string answer is masked as the string it is, with its escapes decoded', async (t) => {
  const { status, text } = await exchange(t, { status: 200, type: 'application/json', body: '"owner: zhang.san\\u0040example.com"' }, 'mask');
  t.equal(status, 200);
  t.equal(JSON.parse(text), 'owner: [EMAIL]');
});

t.test('an answer that is an array of strings has each string masked', async (t) => {
  const { text } = await exchange(t, json(200, [`owner: ${EMAIL}`, 'plain']), 'mask');
  t.same(JSON.parse(text), ['owner: [EMAIL]', 'plain']);
});

t.test('a top-level field beside a JSON-RPC answer is checked, and the envelope is left as it is', async (t) => {
  const { text } = await exchange(t, json(200, { jsonrpc: '2.0', id: 7, result: { content: [{ type: 'text', text: EMAIL }] }, message: `owner: ${EMAIL}` }), 'mask');
  t.same(JSON.parse(text), { jsonrpc: '2.0', id: 7, result: { content: [{ type: 'text', text: '[EMAIL]' }] }, message: 'owner: [EMAIL]' });
  const blocked = await exchange(t, json(200, { jsonrpc: '2.0', id: 7, result: { content: [] }, message: `owner: ${EMAIL}` }), 'block');
  t.equal(blocked.status, 400);
  t.notOk(blocked.text.includes(EMAIL));
});

t.test('an event whose data is a JSON object that is not JSON-RPC is masked in the relayed stream', async (t) => {
  const { text } = await exchange(t, events(JSON.stringify({ detail: `owner: ${EMAIL}` }), rpcAnswer), 'mask');
  t.match(text, 'data: {"detail":"owner: [EMAIL]"}\n\n');
  t.match(text, `data: ${rpcAnswer}\n\n`, 'the answer still follows');
  t.notOk(text.includes(EMAIL));
});

t.test('an event whose data is a JSON object that is not JSON-RPC ends the stream under an output block rule', async (t) => {
  const { text } = await exchange(t, events(JSON.stringify({ detail: `owner: ${EMAIL}` }), rpcAnswer), 'block');
  t.notOk(text.includes(EMAIL));
  t.match(text, /"id":7,"error":\{"code":-32000,.*ZN_ERR_GUARDRAIL_BLOCKED/, 'the pending call gets the blocked error');
});

t.test('an event whose JSON string data hides the match behind an escape is masked decoded', async (t) => {
  const { text } = await exchange(t, events('"owner: zhang.san\\u0040example.com"', rpcAnswer), 'mask');
  t.match(text, 'data: "owner: [EMAIL]"\n\n');
});

t.test('an event holding a duplicate key goes out as checked, not with the earlier value', async (t) => {
  const { text } = await exchange(t, events(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"${EMAIL}","text":"ok"}]}}`), 'mask');
  t.notOk(text.includes(EMAIL), 'the value JSON.parse dropped is not relayed');
  t.match(text, 'data: {"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"ok"}]}}\n\n');
});

t.test("a caller's extra top-level field beside a JSON-RPC request is masked before it reaches the tool server", async (t) => {
  const { status, received } = await exchange(t, json(200, JSON.parse(rpcAnswer)), 'mask', 'input', { ...toolCall, note: `from ${EMAIL}` });
  t.equal(status, 200);
  t.equal(received.length, 1);
  t.same(JSON.parse(received[0]!), { ...toolCall, note: 'from [EMAIL]' });
});
