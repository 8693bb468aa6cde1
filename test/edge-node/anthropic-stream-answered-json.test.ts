// An Anthropic upstream that answers a stream request with JSON instead of an event stream: the
// attempt fails with a clear code, the upstream body is drained, and the node keeps serving (the
// body used to be destroyed bare, which raised an error nobody listened to: an uncaught exception).
// The upstream did the work and bills it, so the request is metered with the answer's own usage.
import t from 'tap';
import { startRawUpstream } from '../fixtures/raw-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';

const JSON_ANSWER = JSON.stringify({
  id: 'msg_1',
  type: 'message',
  role: 'assistant',
  model: 'claude-real',
  content: [{ type: 'text', text: 'hello' }],
  stop_reason: 'end_turn',
  usage: { input_tokens: 3, output_tokens: 5 },
});

t.test('a stream request answered with JSON is a 502 naming the problem, and the node goes on serving', async (t) => {
  const uncaught: unknown[] = [];
  const onUncaught = (err: unknown): void => void uncaught.push(err);
  process.on('uncaughtException', onUncaught);
  t.teardown(() => process.off('uncaughtException', onUncaught));
  const upstream = await startRawUpstream(t, (socket) => {
    socket.end(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(JSON_ANSWER)}\r\n\r\n${JSON_ANSWER}`);
  });
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base) => ({
      upstreams: [{ id: 'up-c', name: 'claude', kind: 'anthropic', baseUrl: upstream.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 10_000 }],
      routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 10_000, retries: 0 }],
    }),
  });
  const call = async (): Promise<{ status: number; requestId: string | null; body: { error?: { code?: string; message?: string } } }> => {
    const res = await fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret },
      body: JSON.stringify({ model: 'claude', max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    return { status: res.status, requestId: res.headers.get('x-request-id'), body: (await res.json()) as { error?: { code?: string; message?: string } } };
  };
  for (let i = 0; i < 3; i++) {
    const { status, body, requestId } = await call();
    t.equal(status, 502);
    t.match(body.error?.message, /did not answer the stream request with an event stream/);
    const done = await waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: 'the finished request' });
    t.match(done, { outcome: { status: 'failed' }, usage: { inputTokens: 3, outputTokens: 5, estimated: false } }, "metered with the answer's usage: the upstream billed it");
  }
  // A destroyed body's 'error' is emitted on the next tick after destroy(), long before the 502 is sent.
  t.same(uncaught.map(String), [], 'no uncaught exception');
});
