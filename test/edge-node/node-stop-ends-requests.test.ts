// A node that stops waits for its requests (ZENOVA_NODE_SHUTDOWN_DRAIN_MS); those still running at
// the deadline are ended by the node, not cut: a stream gets the error event ZN_ERR_NODE_STOPPING,
// a request not answered yet a 503 with that code and x-should-retry: true, and each is recorded
// `failed` with that code (closing their sockets recorded them `aborted`, as if their callers had
// left). While it drains, every answer says Connection: close, so a keep-alive caller never sends
// its next request to a socket the node is about to close.
import http from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import t from 'tap';
import type { RequestRecord } from '../../proto/src/index.js';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { rawToolServer } from './mcp/priced-tool-node.js';
import { listenForTest } from '../fixtures/loopback-server.js';
import { waitFor } from '../fixtures/wait-for.js';
import { recordsInto } from './anthropic-fixtures.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';

const CHUNK = { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo', choices: [{ index: 0, delta: { role: 'assistant', content: 'Hello there' }, finish_reason: null }] };

/**
 * An upstream that answers a stream's first chunk and then nothing, and a JSON request never; with
 * `whole`, a stream's whole answer ([DONE] too) in one write, its body then left open (a proxy that lingers).
 */
async function stallingUpstream(t: { teardown(fn: () => unknown): void }, whole = false): Promise<{ url: string; received: () => number }> {
  let received = 0;
  const open = new Set<http.ServerResponse>();
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      received += 1;
      open.add(res);
      res.on('close', () => open.delete(res));
      if ((JSON.parse(body) as { stream?: boolean }).stream === true) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const finish = { ...CHUNK, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] };
        res.write(`data: ${JSON.stringify(CHUNK)}\n\n${whole ? `data: ${JSON.stringify(finish)}\n\ndata: [DONE]\n\n` : ''}`);
      }
    });
  });
  const url = await listenForTest(t, server);
  t.teardown(() => {
    for (const res of open) res.destroy();
  });
  return { url, received: () => received };
}

async function stoppingNode(t: { teardown(fn: () => unknown): void }, whole = false) {
  const upstream = await stallingUpstream(t, whole);
  const records: RequestRecord[] = [];
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { spool: recordsInto(records) } });
  const post = (body: unknown) =>
    fetch(`${node.origin}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` }, body: JSON.stringify(body) });
  return { node, upstream, records, post };
}

/** The stream's whole text as the caller reads it when the node ends its requests once the first chunk arrived. */
async function streamStoppedAfterFirstChunk(node: Awaited<ReturnType<typeof stoppingNode>>['node'], res: Response): Promise<string> {
  const reader = res.body!.getReader();
  let text = '';
  while (!text.includes('Hello there')) text += new TextDecoder().decode((await reader.read()).value);
  await node.app.inFlight.stopAll(5_000);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return text;
    text += new TextDecoder().decode(value);
  }
}

t.test('a stream still running when the node ends its requests gets the error event ZN_ERR_NODE_STOPPING and is recorded failed with that code', async (t) => {
  const { node, records, post } = await stoppingNode(t);
  const res = await post({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'hi' }] });
  t.equal(res.status, 200);
  const text = await streamStoppedAfterFirstChunk(node, res);
  t.match(text, /"code":"ZN_ERR_NODE_STOPPING"/, 'the stream ends with the error event');
  const record = await waitFor(() => records[0], { what: 'the record' });
  t.match(record, { status: 'failed', errorCode: 'ZN_ERR_NODE_STOPPING', httpStatus: 200 });
  t.ok(record.usage.outputTokens > 0, 'what was delivered is metered');
});

t.test('a stream whose whole answer came ([DONE]) while the upstream lingers goes out whole when the node ends its requests, recorded ok', async (t) => {
  const { node, records, post } = await stoppingNode(t, true);
  const res = await post({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'hi' }] });
  // The node read [DONE] with the first chunk (one write): it holds it while it drains the lingering body.
  const text = await streamStoppedAfterFirstChunk(node, res);
  t.match(text, /data: \[DONE\]/, 'the answer ends as the upstream ended it');
  t.notMatch(text, /ZN_ERR_NODE_STOPPING/, 'not with an error telling the caller to send it again');
  const record = await waitFor(() => records[0], { what: 'the record' });
  t.match(record, { status: 'ok', errorCode: null });
});

t.test('a request not answered yet when the node ends its requests gets 503 ZN_ERR_NODE_STOPPING, to be sent again, and is recorded failed', async (t) => {
  const { node, upstream, records, post } = await stoppingNode(t);
  const answer = post({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] });
  await waitFor(() => upstream.received() === 1 || undefined, { what: 'the upstream to have the request' });
  await node.app.inFlight.stopAll(5_000);
  const res = await answer;
  t.equal(res.status, 503);
  t.equal(((await res.json()) as { error: { code: string } }).error.code, 'ZN_ERR_NODE_STOPPING');
  t.equal(res.headers.get('x-should-retry'), 'true');
  t.equal(res.headers.get('connection'), 'close');
  const record = await waitFor(() => records[0], { what: 'the record' });
  t.match(record, { status: 'failed', errorCode: 'ZN_ERR_NODE_STOPPING', httpStatus: 503 });
  // The upstream had the request, but the caller is told to send it again: charged nothing.
  t.same(record.usage, { inputTokens: 0, outputTokens: 0, estimated: false });
  t.equal(record.upstream, null);
});

t.test('while the node drains, its answers close their keep-alive connections', async (t) => {
  const { node } = await stoppingNode(t);
  const agent = new http.Agent({ keepAlive: true });
  t.teardown(() => agent.destroy());
  const get = () =>
    new Promise<http.IncomingMessage>((resolve, reject) => {
      http.get(`${node.origin}/healthz`, { agent }, (res) => {
        res.resume();
        resolve(res);
      }).on('error', reject);
    });
  t.equal((await get()).headers.connection, 'keep-alive', 'before the stop');
  node.app.inFlight.drain();
  t.equal((await get()).headers.connection, 'close', 'while draining');
});

const TOOL_CALL = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"lookup","arguments":{}}}';

/** A node serving the tools surface in front of `tool`, and one `tools/call` POSTed to it (id 7); the app and what it recorded. */
async function postToolCall(t: { teardown(fn: () => unknown): void }, toolUrl: string): Promise<{ app: FastifyInstance; records: RequestRecord[]; answer: Promise<Response> }> {
  const { app, records, secret } = await toolNode(t, toolUrl);
  const answer = fetch(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, {
    method: 'POST',
    headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: TOOL_CALL,
  });
  return { app, records, answer };
}

/** A node serving the tools surface in front of `tool`: the app, what it recorded, and a caller key's secret. */
async function toolNode(t: { teardown(fn: () => unknown): void }, toolUrl: string): Promise<{ app: FastifyInstance; records: RequestRecord[]; secret: string }> {
  const caller = newCallerKey();
  const records: RequestRecord[] = [];
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-mcp', caller.sha256)],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolUrl, apiKey: null, timeoutMs: 10_000, callMicros: 0 }],
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: bundle.nodeId, spool: recordsInto(records) } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return { app, records, secret: caller.secret };
}

t.test("an MCP POST's event stream still running when the node ends its requests answers each pending request with ZN_ERR_NODE_STOPPING", async (t) => {
  const tool = await rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"working"}}\n\n');
  });
  const { app, records, answer } = await postToolCall(t, tool.url);
  const res = await answer;
  const reader = res.body!.getReader();
  let text = '';
  while (!text.includes('working')) text += new TextDecoder().decode((await reader.read()).value);
  await app.inFlight.stopAll(5_000);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  t.match(text, /data: \{"jsonrpc":"2\.0","id":7,"error":\{"code":-32000,[^\n]*"data":\{"code":"ZN_ERR_NODE_STOPPING"\}/, 'the pending request is answered, so the client does not wait for its timeout');
  t.match(text, /had received the call, which may have run: check its outcome before sending it again/, 'not "send it again": the tool may have run');
  const record = await waitFor(() => records[0], { what: 'the record' });
  t.match(record, { status: 'failed', errorCode: 'ZN_ERR_NODE_STOPPING' });
});

t.test("an MCP POST's event stream whose caller stopped reading is ended by the node's stop and recorded failed ZN_ERR_NODE_STOPPING while the caller still holds its connection, its pending request answered after what the buffers held", async (t) => {
  // A tool server that sends progress notifications as fast as its socket takes them (at most 64 MiB).
  const tool = await rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const event = `event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"${'working '.repeat(400)}"}}\n\n`;
    let written = 0;
    const pump = (): void => {
      while (!res.destroyed && written < 64 * 1024 * 1024) {
        written += event.length;
        if (!res.write(event)) {
          res.once('drain', pump);
          return;
        }
      }
    };
    pump();
  });
  const { app, records, secret } = await toolNode(t, tool.url);
  let answer: http.ServerResponse | undefined;
  app.server.once('request', (_req: http.IncomingMessage, res: http.ServerResponse) => (answer = res));
  const socket = connect((app.server.address() as AddressInfo).port, '127.0.0.1');
  socket.on('error', () => undefined);
  t.teardown(() => socket.destroy());
  let text = '';
  socket.on('data', (chunk: Buffer) => (text = (text + chunk.toString('latin1')).slice(-8192)));
  socket.write(`POST /mcp/tools HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${secret}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: ${TOOL_CALL.length}\r\n\r\n${TOOL_CALL}`);
  // Never read: the node's answer fills the buffers and it waits for its caller.
  socket.pause();
  await waitFor(() => answer?.writableNeedDrain || undefined, { what: 'the node to wait for its caller', timeoutMs: 20_000 });
  void app.inFlight.stopAll(60_000);
  const record = await waitFor(() => records[0], { what: 'the record', timeoutMs: 20_000 });
  t.match(record, { status: 'failed', errorCode: 'ZN_ERR_NODE_STOPPING' }, 'ended by the node, not recorded as a caller that left');
  t.equal(socket.destroyed, false, 'the caller still holds its connection');
  socket.resume();
  await waitFor(() => /"id":7,"error":\{[^\n]*"code":"ZN_ERR_NODE_STOPPING"/.test(text) || undefined, { what: 'the pending request\'s answer', timeoutMs: 20_000 });
  t.pass('the caller that reads on gets its pending request answered');
});

t.test('an MCP tool call the tool server had when the node ended it is answered 503 ZN_ERR_NODE_STOPPING not to be sent again blindly: it may have run', async (t) => {
  let received = 0;
  const tool = await rawToolServer(t, () => {
    received += 1; // and never answers
  });
  const { app, records, answer } = await postToolCall(t, tool.url);
  await waitFor(() => received === 1 || undefined, { what: 'the tool server to have the call' });
  await app.inFlight.stopAll(5_000);
  const res = await answer;
  t.equal(res.status, 503);
  const body = (await res.json()) as { error: { code: string; message: string } };
  t.equal(body.error.code, 'ZN_ERR_NODE_STOPPING');
  t.match(body.error.message, /may have run: check its outcome before sending it again/);
  t.equal(res.headers.get('x-should-retry'), 'false');
  const record = await waitFor(() => records[0], { what: 'the record' });
  t.match(record, { status: 'failed', errorCode: 'ZN_ERR_NODE_STOPPING' });
});

t.test('a request whose body is still arriving when the node ends its requests is answered 503 ZN_ERR_NODE_STOPPING once it arrives, and never sent upstream', async (t) => {
  const { node, upstream, records } = await stoppingNode(t);
  const body = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] });
  const socket = connect(Number(new URL(node.origin).port), '127.0.0.1');
  let answer = '';
  socket.on('data', (chunk: Buffer) => (answer += chunk.toString()));
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nauthorization: Bearer ${node.secret}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, 10)}`);
  await waitFor(() => node.app.inFlight.size === 1 || undefined, { what: 'the request to be in flight' });
  const stopped = node.app.inFlight.stopAll(5_000);
  socket.write(body.slice(10));
  await stopped;
  await waitFor(() => answer.includes('ZN_ERR_NODE_STOPPING') || undefined, { what: 'the answer' });
  t.match(answer, /^HTTP\/1\.1 503 /);
  t.match(answer, /connection: close/i);
  t.equal(upstream.received(), 0, 'nothing went upstream');
  const record = await waitFor(() => records[0], { what: 'the record' });
  t.match(record, { status: 'failed', errorCode: 'ZN_ERR_NODE_STOPPING' });
  socket.destroy();
});
