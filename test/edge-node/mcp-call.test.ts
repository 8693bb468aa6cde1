// The `mcp` API handler on its own (identify → route → forward) against a real MCP tool server:
// JSON-RPC envelope checks, the caller's tool arguments as guardrail-writable text, the tool
// server looked up by name, and the forwarded call — the server's key injected, never the
// caller's, MCP headers both ways, JSON and event-stream answers, failures as the node's codes.
import { createServer } from 'node:http';
import type { IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { ToolServer } from '../../proto/src/index.js';
import { noCredit } from '../../edge-node/src/billing/credit-leases.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import type { RuntimeConfig } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { noMetrics } from '../../edge-node/src/metrics/pipeline-metrics.js';
import { systemClock } from '../../edge-node/src/pipeline/clock.js';
import type { PipelineContext, UpstreamReply } from '../../edge-node/src/pipeline/context.js';
import type { StageResult } from '../../edge-node/src/pipeline/stage.js';
import { mcpApi } from '../../edge-node/src/providers/mcp/mcp-call.js';
import { SessionOwners } from '../../edge-node/src/providers/mcp/session-owners.js';
import { TargetHealth } from '../../edge-node/src/routing/target-health.js';
import { noRateLimits } from '../../edge-node/src/rate-limit/rate-limiter.js';
import { noSpool } from '../../edge-node/src/spool/request-spool.js';
import { UpstreamPool } from '../../edge-node/src/upstream/upstream-pool.js';
import { startFakeToolServer } from '../fixtures/fake-tool-server.js';
import { bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { AbortSwitch } from '../../edge-node/src/pipeline/abort-switch.js';

const TOOL_KEY = 'mcp-tool-server-key-for-tests-0042';
const CALLER_SECRET = newCallerKey().secret;
const PROTOCOL_VERSION = '2025-06-18';

function configWith(toolServers: ToolServer[]): RuntimeConfig {
  return fromBundle(testBundle({
    nodeId: 'node-1', version: 3, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [bundleKey('k1', newCallerKey().sha256)],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers,
  }));
}

function toolServer(name: string, url: string, overrides: Partial<ToolServer> = {}): ToolServer {
  return { name, url, apiKey: TOOL_KEY, timeoutMs: 10_000, callMicros: 0, ...overrides };
}

let requestCounter = 0;
/** A context as the runner builds it, for one MCP call. */
function mcpContext(opts: { method: string; server: string; body?: unknown; headers?: IncomingHttpHeaders; config: RuntimeConfig }): PipelineContext {
  requestCounter += 1;
  const headers: IncomingHttpHeaders = { authorization: `Bearer ${CALLER_SECRET}`, accept: 'application/json, text/event-stream', ...opts.headers };
  return {
    requestId: `req_test_${requestCounter}`,
    clientRequestId: null,
    api: 'mcp',
    surface: 'tools',
    receivedAt: Date.now(),
    startedAt: performance.now(),
    http: {
      method: opts.method,
      path: `/mcp/${opts.server}`,
      headers,
      rawHeaders: Object.entries(headers).flatMap(([name, value]) => (typeof value === 'string' ? [name, value] : [])),
      params: { server: opts.server },
    },
    body: opts.body,
    deps: { nodeId: 'node-1', logger: createLogger({ level: 'silent' }), upstreams: new UpstreamPool(), limiter: noRateLimits, credit: noCredit, spool: noSpool, metrics: noMetrics, sessionOwners: new SessionOwners(), targetHealth: new TargetHealth() },
    clock: systemClock,
    callerGone: new AbortSwitch(),
    config: opts.config,
    model: null, stream: false, maxOutputTokens: null, estimatedInputTokens: 0, inputTexts: [], attempts: [], upstreamUsage: null,
    upstreamFirstByteMs: null, upstreamMs: null, responseText: '', responseTextChars: 0, responseTextDenseWeight: 0, guardedTextChars: 0, guardedTextDenseWeight: 0, deliveredInputTokens: 0, guardrails: [], usage: { inputTokens: 0, outputTokens: 0, estimated: false },
    cost: { reservedMicros: 0, costMicros: 0, leaseId: null, priced: false }, openRowDurable: null, responseHeaders: {}, stagesUs: {},
    outcome: { status: 'ok', httpStatus: 200, errorCode: null }, cleanups: [], releaseSlot: null,
  };
}

function codeOf(result: StageResult): string | undefined {
  return result?.error.code;
}

/** identify, route and forward in order, stopping at the first rejection. */
async function run(ctx: PipelineContext): Promise<StageResult> {
  return mcpApi.identify(ctx) ?? mcpApi.route(ctx) ?? (await mcpApi.forward(ctx));
}

async function rawText(reply: UpstreamReply | undefined): Promise<string> {
  if (reply?.kind !== 'raw') throw new Error(`expected a raw reply, got ${reply?.kind}`);
  const chunks: Buffer[] = [];
  for await (const chunk of reply.body) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks).toString('utf8');
}

const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: PROTOCOL_VERSION, capabilities: {}, clientInfo: { name: 'test', version: '1' } } };

t.test('identify checks the JSON-RPC envelope and names the problem', async (t) => {
  const config = configWith([]);
  const bad: unknown[] = [undefined, {}, { jsonrpc: '1.0', method: 'x' }, { jsonrpc: '2.0', id: 1 }, [], 'text',
    Array.from({ length: 101 }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'ping' })),
    { jsonrpc: '2.0', id: 1, result: {}, error: { code: 1, message: 'both' } }];
  for (const body of bad) {
    const ctx = mcpContext({ method: 'POST', server: 'tools', body, config });
    const result = mcpApi.identify(ctx);
    t.equal(codeOf(result), 'ZN_ERR_INVALID_REQUEST', JSON.stringify(body)?.slice(0, 60) ?? 'no body');
    t.match(result?.error.message, /^Invalid request: /);
  }
  const good: unknown[] = [initialize, { jsonrpc: '2.0', method: 'notifications/initialized' }, { jsonrpc: '2.0', id: 'a', result: {} },
    [{ jsonrpc: '2.0', id: 1, method: 'ping' }, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1 } }]];
  for (const body of good) t.equal(mcpApi.identify(mcpContext({ method: 'POST', server: 'tools', body, config })), undefined, JSON.stringify(body).slice(0, 60));
});

t.test('identify records the server as the model and the GET stream as a stream', async (t) => {
  const config = configWith([]);
  const get = mcpContext({ method: 'GET', server: 'tools', headers: { accept: 'text/event-stream' }, config });
  t.equal(mcpApi.identify(get), undefined);
  t.equal(get.model, 'tools');
  t.equal(get.stream, true);
  const del = mcpContext({ method: 'DELETE', server: 'tools', config });
  t.equal(mcpApi.identify(del), undefined);
  t.equal(del.stream, false);
});

t.test("every string value and key under params is input text (keys after values), and rewriting it changes what is sent, not the body received", async (t) => {
  const body = {
    jsonrpc: '2.0', id: 7, method: 'tools/call',
    params: { name: 'echo', arguments: { text: 'mail me at a@b.example', nested: { list: ['one', 2, 'three'] } }, _meta: { progressToken: 'tok' } },
  };
  const ctx = mcpContext({ method: 'POST', server: 'tools', body, config: configWith([]) });
  t.equal(mcpApi.identify(ctx), undefined);
  t.same(ctx.inputTexts.map((s) => s.text), ['echo', 'mail me at a@b.example', 'one', 'three', 'tok', 'name', 'arguments', 'text', 'nested', 'list', '_meta', 'progressToken']);
  t.ok(ctx.estimatedInputTokens > 0, 'the arguments are estimated');
  ctx.inputTexts[1]!.text = 'mail me at [EMAIL]';
  ctx.inputTexts[7]!.text = '[REDACTED]';
  t.same((ctx.forwardBody as { params: unknown }).params, { name: 'echo', arguments: { '[REDACTED]': 'mail me at [EMAIL]', nested: { list: ['one', 2, 'three'] } }, _meta: { progressToken: 'tok' } },
    'the forwarded copy is rewritten: a value in place, a key renamed');
  t.equal(body.params.arguments.text, 'mail me at a@b.example', 'the body as received is not');
  const list = mcpContext({ method: 'POST', server: 'tools', body: { jsonrpc: '2.0', id: 1, method: 'tools/list' }, config: configWith([]) });
  mcpApi.identify(list);
  t.same(list.inputTexts, [], 'a message without params carries no caller text');
  const answer = mcpContext({ method: 'POST', server: 'tools', body: { jsonrpc: '2.0', id: 'e1', result: { action: 'accept', content: { email: 'a@b.example' } } }, config: configWith([]) });
  mcpApi.identify(answer);
  t.same(answer.inputTexts.map((s) => s.text), ['accept', 'a@b.example', 'action', 'content', 'email'], "a client's response (an elicitation answer) is input text too");
});

t.test('route refuses a server the config does not name, and quotes only well-formed names', async (t) => {
  const config = configWith([toolServer('tools', 'http://127.0.0.1:9/mcp')]);
  const unknown = mcpContext({ method: 'POST', server: 'other', body: initialize, config });
  mcpApi.identify(unknown);
  const result = mcpApi.route(unknown);
  t.equal(codeOf(result), 'ZN_ERR_TOOL_SERVER_NOT_FOUND');
  t.equal(result?.error.status, 404);
  t.match(result?.error.message, /"other"/);
  const odd = mcpContext({ method: 'POST', server: '<script>', body: initialize, config });
  mcpApi.identify(odd);
  t.notMatch(mcpApi.route(odd)?.error.message, /script/);
  const known = mcpContext({ method: 'POST', server: 'tools', body: initialize, config });
  mcpApi.identify(known);
  t.equal(mcpApi.route(known), undefined);
  t.equal(known.toolServer?.name, 'tools');
});

t.test('a JSON-answering tool server: the session is carried both ways, with the server key and never the caller key', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY, jsonResponse: true });
  const config = configWith([toolServer('tools', fake.url)]);

  const init = mcpContext({ method: 'POST', server: 'tools', body: initialize, config });
  t.equal(await run(init), undefined);
  t.equal(init.reply?.kind, 'json');
  const sessionId = init.reply?.headers['mcp-session-id'];
  t.ok(sessionId, 'the session id comes back to the caller');
  t.match(init.reply?.kind === 'json' ? init.reply.body : undefined, { jsonrpc: '2.0', id: 1, result: { serverInfo: { name: 'fake-tools' } } });
  t.same(init.served, { upstream: 'tools', model: 'initialize' });
  t.match(init.attempts, [{ upstream: 'tools', model: 'initialize', outcome: 'ok', httpStatus: 200 }]);
  t.ok(init.upstreamFirstByteMs !== null && init.upstreamMs !== null, 'timed');

  const session = { 'mcp-session-id': sessionId!, 'mcp-protocol-version': PROTOCOL_VERSION };
  const note = mcpContext({ method: 'POST', server: 'tools', body: { jsonrpc: '2.0', method: 'notifications/initialized' }, headers: session, config });
  t.equal(await run(note), undefined);
  t.equal(note.reply?.status, 202, 'a notification is accepted');
  t.equal(await rawText(note.reply), '', 'with no body');

  const call = mcpContext({ method: 'POST', server: 'tools', headers: session, config,
    body: { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'echo', arguments: { text: 'secret plan' } } } });
  t.equal(mcpApi.identify(call), undefined);
  call.inputTexts.find((slot) => slot.text === 'secret plan')!.text = '[MASKED] plan';
  t.equal(mcpApi.route(call) ?? (await mcpApi.forward(call)), undefined);
  t.same(fake.toolCalls.at(-1), { tool: 'echo', args: { text: '[MASKED] plan' } }, 'the tool ran on the rewritten arguments');
  if (call.reply?.kind !== 'json') throw new Error('expected a json reply');
  const toolText = call.reply.texts.find((s) => s.text === 'echo: [MASKED] plan');
  t.ok(toolText, "the tool's text is open to output guardrails");
  toolText!.text = 'rewritten';
  t.match(call.reply.body, { result: { content: [{ type: 'text', text: 'rewritten' }] } }, 'and rewriting it rewrites the answer');
  t.equal(call.responseText, '', 'the text is recorded at delivery, after output guardrails, not here');

  const seen = fake.requests.filter((r) => r.method === 'POST');
  t.equal(seen.length, 3);
  for (const r of seen) {
    t.equal(r.headers.authorization, `Bearer ${TOOL_KEY}`, 'the tool server got its own key');
    t.notOk(JSON.stringify(r.headers).includes(CALLER_SECRET), "the caller's key never reaches it");
    t.match(r.headers['x-request-id'], /^req_test_/);
  }
  t.equal(seen[2]?.headers['mcp-session-id'], sessionId);
  t.equal(seen[2]?.headers['mcp-protocol-version'], PROTOCOL_VERSION);

  const end = mcpContext({ method: 'DELETE', server: 'tools', headers: session, config });
  t.equal(await run(end), undefined);
  t.equal(end.reply?.status, 200);
  t.equal(fake.sessions(), 0, 'DELETE ended the session on the tool server');
  t.same(end.served, { upstream: 'tools', model: 'DELETE' });

  const gone = mcpContext({ method: 'POST', server: 'tools', headers: session, config, body: { jsonrpc: '2.0', id: 3, method: 'tools/list' } });
  t.equal(await run(gone), undefined, "the tool server's 404 for an ended session is relayed, not turned into a node error");
  t.equal(gone.reply?.status, 404);
});

t.test('an event-stream-answering tool server is relayed byte for byte', async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY });
  const config = configWith([toolServer('tools', fake.url)]);
  const init = mcpContext({ method: 'POST', server: 'tools', body: initialize, config });
  t.equal(await run(init), undefined);
  t.equal(init.reply?.kind, 'raw');
  t.match(init.reply?.headers['content-type'], /^text\/event-stream/);
  t.ok(init.reply?.headers['mcp-session-id']);
  const text = await rawText(init.reply);
  t.match(text, /^event: message\ndata: \{.*"serverInfo":\{"name":"fake-tools"/m);
  t.ok(init.upstreamMs !== null, 'timed once the stream ended');
  t.match(init.responseText, /fake-tools/, 'a bounded copy for the record');
});

t.test("tool server failures are the node's upstream codes, with the attempt recorded", async (t) => {
  const fake = await startFakeToolServer(t, { apiKey: TOOL_KEY, jsonResponse: true });
  const wrongKey = mcpContext({ method: 'POST', server: 'tools', body: initialize, config: configWith([toolServer('tools', fake.url, { apiKey: 'not-the-key' })]) });
  const refused = await run(wrongKey);
  t.equal(codeOf(refused), 'ZN_ERR_UPSTREAM_ERROR');
  t.equal(refused?.error.status, 502, "a tool server refusing the node's key is not the caller's fault");
  t.match(wrongKey.attempts, [{ outcome: 'status', httpStatus: 401 }]);

  const down = createServer();
  await new Promise<void>((resolve) => down.listen(0, '127.0.0.1', resolve));
  const port = (down.address() as AddressInfo).port;
  await new Promise<void>((resolve) => down.close(() => resolve()));
  const unreachable = mcpContext({ method: 'POST', server: 'tools', body: initialize, config: configWith([toolServer('tools', `http://127.0.0.1:${port}/mcp`)]) });
  t.equal(codeOf(await run(unreachable)), 'ZN_ERR_UPSTREAM_UNAVAILABLE');
  t.match(unreachable.attempts, [{ upstream: 'tools', model: 'initialize', outcome: 'connect', httpStatus: null }]);

  const failing = createServer((_req, res) => res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":{"code":"overloaded"}}'));
  await new Promise<void>((resolve) => failing.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => failing.close(() => resolve())));
  const url = `http://127.0.0.1:${(failing.address() as AddressInfo).port}/mcp`;
  const busy = mcpContext({ method: 'POST', server: 'tools', body: initialize, config: configWith([toolServer('tools', url)]) });
  const result = await run(busy);
  t.equal(codeOf(result), 'ZN_ERR_UPSTREAM_ERROR');
  t.match(result?.error.message, /HTTP 503 \(overloaded\)/);
});

t.test("a tool server's 402, or its 5xx naming billing_error or insufficient_quota, stays the tool server's, not the node's out-of-quota answer for a model upstream", async (t) => {
  const answers: Array<[number, string]> = [
    [402, '{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"payment required"}}'],
    [503, '{"error":{"type":"billing_error","code":"insufficient_quota"}}'],
  ];
  let next = 0;
  const server = createServer((req, res) => {
    req.resume();
    const [status, body] = answers[next++]!;
    res.writeHead(status, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const config = configWith([toolServer('tools', `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`)]);

  const payment = mcpContext({ method: 'POST', server: 'tools', body: initialize, config });
  t.equal(await run(payment), undefined, 'a 402 is MCP semantics the client acts on: relayed');
  t.equal(payment.reply?.status, 402);
  t.match(payment.attempts, [{ outcome: 'status', httpStatus: 402 }]);

  const busy = mcpContext({ method: 'POST', server: 'tools', body: initialize, config });
  const result = await run(busy);
  t.equal(codeOf(result), 'ZN_ERR_UPSTREAM_ERROR');
  t.equal(result?.error.status, 502);
  t.match(result?.error.message, /HTTP 503 \(insufficient_quota\)/);
  t.notMatch(result?.error.message, /out of quota or credit/);
  t.equal(result?.error.retryable, true, 'a tool server failure, not an account to top up');
});
