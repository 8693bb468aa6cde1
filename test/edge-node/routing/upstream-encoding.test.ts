// Upstream calls ask for uncompressed answers: the node reads and parses upstream bodies as sent,
// so without `accept-encoding: identity` an upstream or proxy free to compress (no Accept-Encoding
// means any coding is acceptable) gzipped its JSON and the caller got a 502. The caller's own
// Accept-Encoding is never forwarded; an upstream that compresses anyway fails the attempt (never
// sent again to that target: it did the work; falls back, counted against the target's health), and
// is a 502 naming the coding when no target answers, with x-should-retry: false.
import t from 'tap';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import { anthropicMessageJson, chatCompletionJson } from '../../fixtures/canned-answers.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { startRawUpstream } from '../../fixtures/raw-upstream.js';
import { TargetHealth } from '../../../edge-node/src/routing/target-health.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';
import type { ConfigBundle } from '../../../proto/src/index.js';

type Teardown = { teardown(fn: () => unknown): void };

const CHAT_ANSWER = chatCompletionJson('plain', { prompt_tokens: 3, completion_tokens: 1 });
const CHAT_STREAM =
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index: 0, delta: { content: 'plain' }, finish_reason: null }] })}\n\n` +
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n` +
  'data: [DONE]\n\n';
const MESSAGES_ANSWER = anthropicMessageJson('plain', { input_tokens: 3, output_tokens: 1 });

/**
 * An HTTP upstream that gzips its answers unless the request's Accept-Encoding rules gzip out (as
 * RFC 9110 allows: no Accept-Encoding means any coding), recording each request's Accept-Encoding.
 */
async function compressingUpstream(t: Teardown): Promise<{ url: string; acceptEncodings: Array<string | undefined> }> {
  const acceptEncodings: Array<string | undefined> = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const asked = req.headers['accept-encoding'];
      acceptEncodings.push(asked);
      const request = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { stream?: boolean };
      const [type, text] = req.url?.endsWith('/messages') ? ['application/json', MESSAGES_ANSWER] : request.stream === true ? ['text/event-stream', CHAT_STREAM] : ['application/json', CHAT_ANSWER];
      const gzip = asked === undefined || /gzip|\*/.test(asked);
      const body = gzip ? zlib.gzipSync(text) : Buffer.from(text);
      res.writeHead(200, { 'content-type': type, 'content-length': body.length, ...(gzip ? { 'content-encoding': 'gzip' } : {}) });
      res.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())).then(() => undefined));
  t.teardown(() => server.closeAllConnections());
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, acceptEncodings };
}

function withClaude(upstreamUrl: string): (base: ConfigBundle) => Partial<ConfigBundle> {
  return (base) => ({
    upstreams: [...base.upstreams, { id: 'up-c', name: 'claude', kind: 'anthropic', baseUrl: upstreamUrl, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 10_000 }],
    routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 10_000, retries: 0 }],
  });
}

function post(node: PipelineNode, path: string, body: unknown, headers: Record<string, string>): Promise<Response> {
  return fetch(`${node.origin}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
}

t.test('a chat answer is asked for uncompressed (accept-encoding: identity), not with the caller\'s own accept-encoding', async (t) => {
  const up = await compressingUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: up.url });
  const res = await post(node, '/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${node.secret}`, 'accept-encoding': 'gzip, br' });
  const body = (await res.json()) as { model?: string; choices?: Array<{ message: { content: string } }> };
  t.equal(res.status, 200, JSON.stringify(body));
  t.equal(body.choices?.[0]?.message.content, 'plain');
  t.same(up.acceptEncodings, ['identity']);
});

t.test('a streamed chat answer is asked for uncompressed too', async (t) => {
  const up = await compressingUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: up.url });
  const res = await post(node, '/v1/chat/completions', { model: 'echo', stream: true, messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${node.secret}`, 'accept-encoding': 'gzip' });
  const text = await res.text();
  t.equal(res.status, 200, text);
  t.match(text, /"content":"plain"/);
  t.match(text, /data: \[DONE\]/);
  t.same(up.acceptEncodings, ['identity']);
});

t.test('an Anthropic messages answer is asked for uncompressed too', async (t) => {
  const up = await compressingUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: up.url, bundle: withClaude(up.url) });
  const res = await post(node, '/v1/messages', { model: 'claude', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] }, { 'x-api-key': node.secret, 'accept-encoding': 'gzip' });
  const body = (await res.json()) as { content?: unknown[] };
  t.equal(res.status, 200, JSON.stringify(body));
  t.same(body.content, [{ type: 'text', text: 'plain' }]);
  t.same(up.acceptEncodings, ['identity']);
});

t.test('an upstream that compresses its JSON answer anyway is a 502 naming the Content-Encoding', async (t) => {
  const gz = zlib.gzipSync(CHAT_ANSWER);
  const up = await startRawUpstream(t, (socket) => {
    socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\ncontent-length: ${gz.length}\r\n\r\n`);
    socket.write(gz);
  });
  const node = await startPipelineNode(t, { upstreamUrl: up.url });
  const res = await post(node, '/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${node.secret}` });
  const body = (await res.json()) as { error?: { code?: string; message?: string } };
  t.equal(res.status, 502);
  t.equal(body.error?.code, 'ZN_ERR_UPSTREAM_ERROR');
  t.match(body.error?.message, /Content-Encoding "gzip"/);
});

/**
 * A raw upstream that gzips every answer whatever it was asked (a JSON answer, or an event stream
 * to a request with `stream: true`), under routes `echo` and `claude` that allow a retry each.
 */
async function gzippingUpstream(t: Teardown): Promise<{ url: string; bundle: (base: ConfigBundle) => Partial<ConfigBundle> }> {
  const ANTHROPIC_STREAM = 'event: message_start\ndata: {"type":"message_start","message":{"id":"m1","type":"message","role":"assistant","model":"claude-real","content":[],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":0}}}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n';
  const up = await startRawUpstream(t, (socket, request) => {
    const messages = request.startsWith('POST /v1/messages');
    const stream = request.includes('"stream":true');
    const body = zlib.gzipSync(stream ? (messages ? ANTHROPIC_STREAM : CHAT_STREAM) : messages ? MESSAGES_ANSWER : CHAT_ANSWER);
    // One request per connection (the raw upstream reads only a connection's first).
    socket.write(`HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-type: ${stream ? 'text/event-stream' : 'application/json'}\r\ncontent-encoding: gzip\r\ncontent-length: ${body.length}\r\n\r\n`);
    socket.end(body);
  });
  return {
    url: up.url,
    bundle: (base) => {
      const claude = withClaude(up.url)(base);
      return { ...claude, routes: claude.routes!.map((route) => ({ ...route, retries: 1 })) };
    },
  };
}

t.test('an upstream that compresses its chat stream anyway fails the attempt as a compressed JSON answer does, naming the Content-Encoding', async (t) => {
  const up = await gzippingUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: up.url, bundle: up.bundle });
  for (const stream of [false, true]) {
    const res = await post(node, '/v1/chat/completions', { model: 'echo', stream, messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${node.secret}` });
    const body = (await res.json()) as { error?: { code?: string; message?: string } };
    t.equal(res.status, 502, `stream ${stream}`);
    t.equal(res.headers.get('x-should-retry'), 'false', `stream ${stream}: the target did the work; an SDK resending would be billed again`);
    t.same(body.error, { message: 'Upstream "demo" answered with Content-Encoding "gzip" although the node asked for identity.', type: 'server_error', param: null, code: 'ZN_ERR_UPSTREAM_ERROR' }, `stream ${stream}`);
  }
  const [json, streamed] = node.finished;
  t.same(json?.attempts.map(({ outcome, httpStatus }) => ({ outcome, httpStatus })), [{ outcome: 'error', httpStatus: null }], 'JSON: one failed attempt, not sent again to the target that did the work');
  t.same(streamed?.attempts.map(({ outcome, httpStatus }) => ({ outcome, httpStatus })), json?.attempts.map(({ outcome, httpStatus }) => ({ outcome, httpStatus })), 'the stream\'s attempts are the JSON answer\'s');
});

t.test('an upstream that compresses its Anthropic stream anyway fails the attempt as a compressed JSON answer does, naming the Content-Encoding', async (t) => {
  const up = await gzippingUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: up.url, bundle: up.bundle });
  for (const stream of [false, true]) {
    const res = await post(node, '/v1/messages', { model: 'claude', max_tokens: 50, stream, messages: [{ role: 'user', content: 'hi' }] }, { 'x-api-key': node.secret });
    const body = (await res.json()) as { type?: string; error?: { type?: string; message?: string } };
    t.equal(res.status, 502, `stream ${stream}`);
    t.equal(res.headers.get('x-should-retry'), 'false', `stream ${stream}`);
    t.match(body, { type: 'error', error: { type: 'api_error', message: 'Upstream "claude" answered with Content-Encoding "gzip" although the node asked for identity.' } }, `stream ${stream}`);
  }
  const [json, streamed] = node.finished;
  t.same(json?.attempts.map(({ outcome, httpStatus }) => ({ outcome, httpStatus })), [{ outcome: 'error', httpStatus: null }], 'JSON: one failed attempt, not sent again to the target that did the work');
  t.same(streamed?.attempts.map(({ outcome, httpStatus }) => ({ outcome, httpStatus })), json?.attempts.map(({ outcome, httpStatus }) => ({ outcome, httpStatus })), 'the stream\'s attempts are the JSON answer\'s');
});

t.test('a target that compresses its answer anyway, JSON or a stream, falls back to the next target and counts against its health', async (t) => {
  const up = await gzippingUpstream(t);
  const backup = await startFakeUpstream(t);
  const health = new TargetHealth({ failureThreshold: 2 });
  const node = await startPipelineNode(t, {
    upstreamUrl: up.url,
    services: { targetHealth: health },
    bundle: (base) => ({
      upstreams: [...base.upstreams, { id: 'up-b', name: 'backup', kind: 'openai-compatible', baseUrl: backup.url, apiKey: 'sk-backup-0000000000', timeoutMs: 30_000 }],
      routes: [{ alias: 'fb', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [{ upstream: 'backup', model: 'demo-echo' }], timeoutMs: 10_000, retries: 1 }],
    }),
  });
  for (const stream of [false, true]) {
    const res = await post(node, '/v1/chat/completions', { model: 'fb', stream, messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${node.secret}` });
    t.equal(res.status, 200, `stream ${stream}: the fallback answers`);
    await res.text();
    t.same(node.finished.at(-1)?.attempts.map(({ upstream, outcome }) => `${upstream}:${outcome}`), ['demo:error', 'backup:ok'], `stream ${stream}`);
  }
  const demo = { upstream: { name: 'demo', kind: 'openai-compatible' as const, baseUrl: up.url, apiKey: undefined, timeoutMs: 30_000 }, upstreamModel: 'demo-echo', weight: 1 };
  t.ok(health.isEjected(demo), 'two compressed answers in a row eject the target');
});
