// Media types are case-insensitive (RFC 9110): a stream request answered with
// `Content-Type: Text/Event-Stream` is an event stream, on /v1/chat/completions and /v1/messages
// alike, relayed and recorded ok, not refused as an upstream that ignored `stream: true`.
import t from 'tap';
import { chatChunk, httpChunk, startRawUpstream } from '../fixtures/raw-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { startPipelineNode, withClaudeRoute } from './pipeline/pipeline-harness.js';

const HEAD = 'HTTP/1.1 200 OK\r\nContent-Type: Text/Event-Stream; Charset=UTF-8\r\ntransfer-encoding: chunked\r\n\r\n';
const event = (type: string, fields: Record<string, unknown> = {}): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`;
const ANTHROPIC_EVENTS = [
  event('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 10, output_tokens: 1 } } }),
  event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
  event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hello' } }),
  event('content_block_stop', { index: 0 }),
  event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 3 } }),
  event('message_stop'),
];
const CHAT_EVENTS = [
  chatChunk('Hello'),
  chatChunk(null),
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } })}\n\n`,
  'data: [DONE]\n\n',
];

t.test('a stream answered with Content-Type Text/Event-Stream is relayed as the event stream it is, on both surfaces', async (t) => {
  const upstream = await startRawUpstream(t, (socket, request) => {
    const events = request.startsWith('POST /v1/messages') ? ANTHROPIC_EVENTS : CHAT_EVENTS;
    socket.write(HEAD);
    socket.end(httpChunk(events.join('')) + '0\r\n\r\n');
  });
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, bundle: (base) => withClaudeRoute(base, upstream.url) });
  const cases = [
    { path: '/v1/chat/completions', body: { model: 'echo', stream: true, messages: [{ role: 'user', content: 'hi' }] }, end: /data: \[DONE\]\n\n$/, usage: { inputTokens: 7, outputTokens: 3, estimated: false } },
    { path: '/v1/messages', body: { model: 'claude', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'hi' }] }, end: /event: message_stop\n[^\n]*\n\n$/, usage: { inputTokens: 10, outputTokens: 3, estimated: false } },
  ];
  for (const { path, body, end, usage } of cases) {
    const res = await fetch(`${node.origin}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}`, 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(15_000),
    });
    const text = await res.text();
    t.equal(res.status, 200, `${path}: served`);
    t.match(text, /Hello/, `${path}: the answer's text reached the caller`);
    t.match(text, end, `${path}: the stream ended as complete`);
    const requestId = res.headers.get('x-request-id') ?? res.headers.get('request-id');
    const done = await waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: `the finished request on ${path}` });
    t.same(done.outcome, { status: 'ok', httpStatus: 200, errorCode: null }, `${path}: recorded ok`);
    t.same(done.usage, usage, `${path}: metered with the upstream's usage`);
  }
});
