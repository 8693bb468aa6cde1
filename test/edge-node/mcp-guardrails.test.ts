// Guardrails on the tools surface, end to end: a listening node between callers (raw fetch and the
// official MCP SDK client) and a real MCP tool server (JSON and event-stream answers) or a scripted
// one. Output rules hold for event streams as for JSON answers (block, mask, fail closed, verdicts);
// the record never keeps masked or blocked text; input rules cover every string of every message and
// fail closed past the walk's limits; sessions belong to the key that opened them.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t from 'tap';
import type { Test } from 'tap';
import type { ConfigBundle, GuardrailPolicy, RequestRecord } from '../../proto/src/index.js';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import type { OpenRow, RequestSpool } from '../../edge-node/src/spool/request-spool.js';
import { startFakeToolServer } from '../fixtures/fake-tool-server.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { policy } from './guardrails/guardrail-fixtures.js';

const TOOL_KEY = 'mcp-tool-server-key-for-tests-0042';
const EMAIL = 'zhang.san@example.com';
const PHONE = '13800138000';
const guarded = newCallerKey();
const plain = newCallerKey();

interface RecordingSpool extends RequestSpool {
  records: RequestRecord[];
}

function recordingSpool(): RecordingSpool {
  const records: RequestRecord[] = [];
  return { records, open: (_row: OpenRow) => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
}

/** A node whose key `guarded` has `rules` and whose key `plain` has no policy. */
async function startNode(t: Test, toolServerUrl: string, rules: GuardrailPolicy['rules'], spool: RequestSpool): Promise<string> {
  const bundle: ConfigBundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-guarded', guarded.sha256, { guardrailPolicyId: 'p' }), bundleKey('key-plain', plain.sha256)],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: TOOL_KEY, timeoutMs: 10_000, callMicros: 0 }],
    guardrailPolicies: [policy('p', rules)],
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: bundle.nodeId, spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`;
}

/** A JSON-RPC message as the tests read it. */
interface RpcMessage {
  id?: string | number | null;
  method?: string;
  params?: { message?: string };
  result?: unknown;
  error?: { code?: string | number; message?: string; data?: { code?: string } };
}

interface Answer {
  status: number;
  contentType: string;
  text: string;
  sessionId: string | null;
  /** The JSON-RPC messages of the answer: the JSON body, or each event's data. */
  messages: RpcMessage[];
}

async function post(url: string, body: unknown, headers: Record<string, string>): Promise<Answer> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  const contentType = res.headers.get('content-type') ?? '';
  let messages: RpcMessage[] = [];
  if (contentType.startsWith('text/event-stream')) {
    messages = text.split('\n').filter((line) => line.startsWith('data: ')).map((line) => JSON.parse(line.slice(6)) as RpcMessage);
  } else if (text.length > 0) {
    messages = [JSON.parse(text) as RpcMessage];
  }
  return { status: res.status, contentType, text, sessionId: res.headers.get('mcp-session-id'), messages };
}

const bearer = (key: { secret: string }): Record<string, string> => ({ authorization: `Bearer ${key.secret}` });
const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };
const echo = (text: string, id = 2): unknown => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'echo', arguments: { text } } });

/** initialize + initialized as `key`; the headers that carry the session on. */
async function session(t: Test, url: string, key: { secret: string }): Promise<Record<string, string>> {
  const init = await post(url, initialize, bearer(key));
  t.equal(init.status, 200, 'initialize answered');
  const headers = { ...bearer(key), 'mcp-session-id': init.sessionId ?? '', 'mcp-protocol-version': '2025-06-18' };
  t.equal((await post(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers)).status, 202);
  return headers;
}

async function sdkClient(t: Test, url: string, key: { secret: string }): Promise<Client> {
  const client = new Client({ name: 'zenova-test', version: '1.0.0' });
  t.teardown(() => client.close());
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: bearer(key) } }));
  return client;
}

/** The record of the tools/call whose request body holds `marker`. */
async function recordOf(spool: RecordingSpool, marker: string): Promise<RequestRecord> {
  return waitFor(() => spool.records.find((r) => r.upstreamModel === 'tools/call' && r.bodies?.request?.includes(marker) === true)
    ?? spool.records.find((r) => r.bodies?.request?.includes(marker) === true), { what: `the record of the call carrying ${marker}` });
}

for (const jsonResponse of [true, false]) {
  const mode = jsonResponse ? 'a JSON answer' : 'an event-stream answer';

  t.test(`an output block rule stops ${mode}, the verdict is recorded and the blocked text is neither sent nor kept`, async (t) => {
    const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY, jsonResponse });
    const spool = recordingSpool();
    const url = await startNode(t, fake.url, [{ detector: 'email', action: 'block', on: 'output' }], spool);
    const headers = await session(t, url, guarded);
    const res = await post(url, echo(`id-21 ${EMAIL}`, 21), headers);
    t.notOk(res.text.includes(EMAIL), 'the address never reaches the caller');
    if (jsonResponse) {
      t.equal(res.status, 400);
      t.equal(res.messages[0]?.error?.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
    } else {
      t.equal(res.status, 200, 'the stream had started');
      t.match(res.text, /^event: message\ndata: /, 'the SSE framing is kept');
      t.same(res.messages.map((m) => m.id), [21], 'one answer, for the pending call');
      t.match(res.messages[0], { jsonrpc: '2.0', id: 21, error: { code: -32000, message: /Blocked by guardrail policy "p" rule 0 \(email\) on the output/, data: { code: 'ZN_ERR_GUARDRAIL_BLOCKED' } } });
    }
    const record = await recordOf(spool, 'id-21');
    t.match(record, { status: 'rejected', errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED' });
    t.match(record.guardrails, [{ policyId: 'p', rule: 0, detector: 'email', action: 'block', on: 'output', matches: 1 }]);
    t.notOk(record.bodies?.response?.includes(EMAIL), 'the kept response holds no blocked text (the caller sent the request as is: no input rule)');

    const client = await sdkClient(t, url, guarded);
    await t.rejects(client.callTool({ name: 'echo', arguments: { text: EMAIL } }), { message: /ZN_ERR_GUARDRAIL_BLOCKED|Blocked by guardrail/ }, 'the SDK client gets an error, not the text');
  });

  t.test(`an output mask rule masks ${mode}; the record keeps the masked text once`, async (t) => {
    const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY, jsonResponse });
    const spool = recordingSpool();
    const url = await startNode(t, fake.url, [{ detector: 'email', action: 'mask', on: 'output' }, { detector: 'phone', action: 'block', on: 'output' }], spool);
    const client = await sdkClient(t, url, guarded);
    const answer = await client.callTool({ name: 'echo', arguments: { text: `m1 ${EMAIL}` } });
    t.same(answer.content, [{ type: 'text', text: 'echo: m1 [EMAIL]' }]);
    const masked = await recordOf(spool, 'm1 ');
    t.match(masked, { status: 'ok', errorCode: null });
    t.match(masked.guardrails, [{ detector: 'email', action: 'mask', on: 'output', matches: 1 }]);
    t.notOk(masked.bodies?.response?.includes(EMAIL), 'no address in the kept response');
    t.equal(masked.bodies?.response?.split('echo: m1 [EMAIL]').length, 2, 'the masked tool text is kept exactly once');

    await t.rejects(client.callTool({ name: 'echo', arguments: { text: `b1 call ${PHONE}` } }));
    const blocked = await recordOf(spool, 'b1 ');
    t.match(blocked, { status: 'rejected', errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED' });
    t.notOk(blocked.bodies?.response?.includes(PHONE), 'the blocked number is not in the kept response');
  });
}

t.test('an output rule the node cannot apply refuses MCP calls before they reach the tool server, whatever the client accepts', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const url = await startNode(t, fake.url, [{ detector: 'keywords', action: 'mask', on: 'output' }], recordingSpool());
  const res = await post(url, initialize, bearer(guarded));
  t.equal(res.status, 400);
  t.equal(res.messages[0]?.error?.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  t.match(res.messages[0]?.error?.message, /rule 0 \(keywords\) cannot be applied/);
  t.equal(fake.requests.length, 0, 'the tool server was not called');
  t.equal((await post(url, initialize, bearer(plain))).status, 200, 'a key without the policy is served');
});

t.test('a batch POST is recorded as sent: input masks in the record, blocked text not kept', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY, jsonResponse: true });
  const spool = recordingSpool();
  const url = await startNode(t, fake.url, [{ detector: 'email', action: 'block', on: 'input' }, { detector: 'phone', action: 'mask', on: 'input' }], spool);
  const headers = await session(t, url, guarded);
  const blocked = await post(url, [echo(`batch-1 ${EMAIL}`, 8)], headers);
  t.equal(blocked.status, 400);
  t.equal(blocked.messages[0]?.error?.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  const masked = await post(url, [echo(`batch-2 ${PHONE}`, 9)], headers);
  t.equal(masked.status, 200);
  t.same(fake.toolCalls, [{ tool: 'echo', args: { text: 'batch-2 [PHONE]' } }], 'only the masked call ran');
  const first = await recordOf(spool, 'batch-1');
  t.notOk(first.bodies?.request?.includes(EMAIL), 'the blocked address is not in the record');
  t.match(first.bodies?.request, /batch-1 \[EMAIL\]/);
  const second = await recordOf(spool, 'batch-2');
  t.match(second.bodies?.request, /batch-2 \[PHONE\]/);
  t.notOk(second.bodies?.request?.includes(PHONE));
});

t.test('input rules see every string of every message, keys too, and fail closed past the depth and count limits', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY, jsonResponse: true });
  const url = await startNode(t, fake.url, [{ detector: 'email', action: 'block', on: 'input' }], recordingSpool());
  const headers = await session(t, url, guarded);
  const deep = (levels: number, leaf: unknown): unknown => (levels === 0 ? leaf : { d: deep(levels - 1, leaf) });
  const cases: Array<[string, unknown, RegExp]> = [
    ['an argument nested 70 levels deep', { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'echo', arguments: { text: 'x', d: deep(70, 'harmless') } } }, /more text than guardrails check/],
    ['an argument after 50 000 other strings', { jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name: 'echo', arguments: { pad: Array(50_000).fill('a'), text: 'harmless' } } }, /more text than guardrails check/],
    ['the address as an argument key', { jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'echo', arguments: { text: 'x', [EMAIL]: 1 } } }, /\(email\) on the input/],
    ['prompts/get arguments', { jsonrpc: '2.0', id: 6, method: 'prompts/get', params: { name: 'p', arguments: { q: EMAIL } } }, /\(email\) on the input/],
    ['resources/read uri', { jsonrpc: '2.0', id: 7, method: 'resources/read', params: { uri: `mailto:${EMAIL}` } }, /\(email\) on the input/],
    ["a client's answer to an elicitation", { jsonrpc: '2.0', id: 6, result: { action: 'accept', content: { email: EMAIL } } }, /\(email\) on the input/],
    ['a notification', { jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: EMAIL } }, /\(email\) on the input/],
  ];
  const before = fake.requests.length;
  for (const [what, body, message] of cases) {
    const res = await post(url, body, headers);
    t.equal(res.status, 400, what);
    t.equal(res.messages[0]?.error?.code, 'ZN_ERR_GUARDRAIL_BLOCKED', what);
    t.match(res.messages[0]?.error?.message, message, what);
  }
  t.equal(fake.requests.length, before, 'none of them reached the tool server');
  const plainHeaders = await session(t, url, plain);
  const deepPlain = await post(url, { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'echo', arguments: { text: 'x', d: deep(70, 'harmless') } } }, plainHeaders);
  t.equal(deepPlain.status, 200, 'a key without guardrail rules is not limited by them');
});

/** A scripted MCP endpoint: every POST gets `answer(body)` as JSON or as an event stream. */
async function scriptedToolServer(t: Test, answer: (body: { id?: unknown }) => { json?: unknown; sse?: string }): Promise<string> {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const out = answer(JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id?: unknown });
      if (out.sse !== undefined) res.writeHead(200, { 'content-type': 'text/event-stream', 'mcp-session-id': 's-1' }).end(out.sse);
      else res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 's-1' }).end(JSON.stringify(out.json));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
}

const richResult = {
  content: [{ type: 'text', text: `a ${EMAIL}` }, { type: 'resource', resource: { uri: 'file:///x', mimeType: 'text/plain', text: `b ${EMAIL}` } }],
  structuredContent: { email: EMAIL, nested: [{ note: `c ${EMAIL}` }] },
};

t.test('output masks reach structuredContent, embedded resources and every other string of a JSON answer', async (t) => {
  const url = await startNode(t, await scriptedToolServer(t, (body) => ({ json: { jsonrpc: '2.0', id: body.id, result: richResult } })),
    [{ detector: 'email', action: 'mask', on: 'output' }], recordingSpool());
  const res = await post(url, echo('x', 11), bearer(guarded));
  t.equal(res.status, 200);
  t.notOk(res.text.includes(EMAIL), 'no address anywhere in the answer');
  t.match(res.messages[0]?.result, {
    content: [{ type: 'text', text: 'a [EMAIL]' }, { type: 'resource', resource: { uri: 'file:///x', text: 'b [EMAIL]' } }],
    structuredContent: { email: '[EMAIL]', nested: [{ note: 'c [EMAIL]' }] },
  });
});

t.test('an event stream is masked event by event: every message, its id and event lines kept, unchanged events byte for byte', async (t) => {
  const progress = { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 1, progress: 1, message: `working for ${EMAIL}` } };
  const quiet = 'event: message\nid: ev-1\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":2}}\n\n';
  const url = await startNode(t, await scriptedToolServer(t, (body) => ({
    sse: `: keep-alive\n\nevent: message\r\nid: ev-0\r\ndata: ${JSON.stringify(progress)}\r\n\r\n${quiet}event: message\nid: ev-2\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: body.id, result: richResult })}\n\n`,
  })), [{ detector: 'email', action: 'mask', on: 'output' }], recordingSpool());
  const res = await post(url, echo('x', 12), bearer(guarded));
  t.equal(res.status, 200);
  t.notOk(res.text.includes(EMAIL), 'no address anywhere in the stream');
  t.ok(res.text.startsWith(': keep-alive\n\nevent: message\nid: ev-0\ndata: '), 'comments and event/id lines are kept');
  t.ok(res.text.includes(quiet), 'an event without matches is relayed as it came');
  t.match(res.text, /event: message\nid: ev-2\ndata: \{/);
  t.same(res.messages.map((m) => m.id ?? m.method), ['notifications/progress', 'notifications/progress', 12]);
  t.equal(res.messages[0]?.params?.message, 'working for [EMAIL]');
  t.match(res.messages[2]?.result, { content: [{ text: 'a [EMAIL]' }, { resource: { text: 'b [EMAIL]' } }], structuredContent: { email: '[EMAIL]' } });
});

t.test('a session opened with one key is refused to another key with ZN_ERR_TOOL_SESSION_NOT_FOUND', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY, jsonResponse: true });
  const url = await startNode(t, fake.url, [{ detector: 'email', action: 'flag', on: 'input' }], recordingSpool());
  const owner = await session(t, url, guarded);
  const stolen = { ...owner, ...bearer(plain) };
  const seen = fake.requests.length;
  const res = await post(url, echo('from the other key', 30), stolen);
  t.equal(res.status, 404);
  t.equal(res.messages[0]?.error?.code, 'ZN_ERR_TOOL_SESSION_NOT_FOUND');
  const del = await fetch(url, { method: 'DELETE', headers: stolen });
  t.equal(del.status, 404, 'nor can the other key end it');
  t.equal(fake.requests.length, seen, 'the tool server saw none of it');
  t.equal((await post(url, echo('from the owner', 31), owner)).status, 200, 'the owner keeps using it');
  t.same(fake.toolCalls, [{ tool: 'echo', args: { text: 'from the owner' } }]);
});

/** A tool server whose every answer is the next of `answers` (status, content type, body). */
async function rawToolServer(t: Test, answers: Array<{ status: number; type: string; body: string | Buffer }>): Promise<{ url: string; calls: () => number }> {
  let calls = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const answer = answers[Math.min(calls, answers.length - 1)]!;
      calls += 1;
      res.writeHead(answer.status, { 'content-type': answer.type }).end(answer.body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, calls: () => calls };
}

t.test('a session id the node never bound is refused to every key before it reaches the tool server', async (t) => {
  const ok = { status: 200, type: 'application/json', body: JSON.stringify({ jsonrpc: '2.0', id: 2, result: {} }) };
  const tool = await rawToolServer(t, [ok]);
  const url = await startNode(t, tool.url, [{ detector: 'email', action: 'flag', on: 'input' }], recordingSpool());
  const id = { 'mcp-session-id': 'made-up-by-the-caller' };
  for (const key of [guarded, plain]) {
    const refused = await post(url, echo('x'), { ...bearer(key), ...id });
    t.equal(refused.status, 404);
    t.equal(refused.messages[0]?.error?.code, 'ZN_ERR_TOOL_SESSION_NOT_FOUND', 'an id no initialize through this node opened belongs to nobody');
  }
  t.equal(tool.calls(), 0, 'the refused calls never reached the tool server');
  t.equal((await post(url, echo('x'), bearer(plain))).status, 200, 'a call without a session goes through');
  t.equal(tool.calls(), 1);
});

t.test('a non-JSON answer is masked only when it is text; one that is not text and needs masking is blocked, not corrupted', async (t) => {
  const binary = Buffer.concat([Buffer.from([0xff, 0x00, 0xfe]), Buffer.from(` ${EMAIL} `), Buffer.from([0xc3, 0x28])]);
  const clean = Buffer.from([0xff, 0x00, 0xfe, 0x89, 0x50]);
  const tool = await rawToolServer(t, [
    { status: 200, type: 'text/plain; charset=utf-8', body: `写给 ${EMAIL}` },
    { status: 200, type: 'application/octet-stream', body: binary },
    { status: 200, type: 'application/octet-stream', body: clean },
    { status: 200, type: 'text/plain', body: binary },
  ]);
  const url = await startNode(t, tool.url, [{ detector: 'email', action: 'mask', on: 'output' }], recordingSpool());
  const raw = async (): Promise<Response> => fetch(url, { method: 'POST', headers: { ...bearer(guarded), 'content-type': 'application/json', accept: 'application/json' }, body: JSON.stringify(echo('x')) });
  t.equal(await (await raw()).text(), '写给 [EMAIL]', 'a text body is masked');
  const blocked = async (what: string): Promise<void> => {
    const res = await post(url, echo('x'), bearer(guarded));
    t.equal(res.status, 400, what);
    t.equal(res.messages[0]?.error?.code, 'ZN_ERR_GUARDRAIL_BLOCKED', what);
    t.notOk(res.text.includes(EMAIL), what);
  };
  await blocked('an octet-stream body a mask matched is blocked');
  t.same(Buffer.from(await (await raw()).arrayBuffer()), clean, 'a binary body without matches is relayed byte for byte');
  await blocked('a text/plain body that is not UTF-8 is blocked too');
});
