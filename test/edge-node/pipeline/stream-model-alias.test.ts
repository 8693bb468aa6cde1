// A streamed chat chunk names the alias the caller used as its `model`, never the upstream's model,
// also when the chunk carries another "model" (or "usage") key in a nested object before the
// top-level one: that one is passed on as the upstream wrote it, and the top-level one is edited.
import http from 'node:http';
import t from 'tap';
import { listenForTest } from '../../fixtures/loopback-server.js';
import { startPipelineNode } from './pipeline-harness.js';

/** An upstream streaming `chunks` (as written) then [DONE]. */
async function streamingUpstream(t: { teardown(fn: () => unknown): void }, chunks: string[]): Promise<string> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(`${chunks.map((chunk) => `data: ${chunk}\n\n`).join('')}data: [DONE]\n\n`);
    });
  });
  return listenForTest(t, server);
}

t.test('a streamed chunk with a nested "model" before the top-level one names the alias at the top, the nested one as the upstream wrote it', async (t) => {
  const url = await streamingUpstream(t, [
    '{"id":"c1","object":"chat.completion.chunk","created":1,"x_meta":{"model":"demo-echo","usage":null},"model":"demo-echo","choices":[{"index":0,"delta":{"role":"assistant","content":"a"},"finish_reason":null}],"usage":null}',
    '{"id":"c1","object":"chat.completion.chunk","created":1,"model":"demo-echo","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}',
  ]);
  const node = await startPipelineNode(t, { upstreamUrl: url });
  const stream = await node.client().chat.completions.create({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'x' }] });
  const seen: Array<{ model: string; x_meta?: unknown; hasUsage: boolean }> = [];
  for await (const chunk of stream) seen.push({ model: chunk.model, x_meta: (chunk as { x_meta?: unknown }).x_meta, hasUsage: 'usage' in chunk });
  t.same(seen.map((c) => c.model), ['echo', 'echo'], 'every chunk names the alias');
  t.same(seen[0]!.x_meta, { model: 'demo-echo', usage: null }, 'the nested object is passed on as written');
  t.same(seen.map((c) => c.hasUsage), [false, false], 'the top-level usage: null the node asked for is not passed on');
});

t.test('a streamed chunk whose top-level "model" key is written escaped, with a plain nested one, still names the alias at the top', async (t) => {
  const url = await streamingUpstream(t, [
    '{"id":"c1","object":"chat.completion.chunk","created":1,"mod\\u0065l":"demo-echo","x_meta":{"model":"demo-echo"},"choices":[{"index":0,"delta":{"role":"assistant","content":"a"},"finish_reason":null}],"us\\u0061ge":null,"y":{"k":1,"usage":null}}',
  ]);
  const node = await startPipelineNode(t, { upstreamUrl: url });
  const stream = await node.client().chat.completions.create({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'x' }] });
  const seen: Array<Record<string, unknown>> = [];
  for await (const chunk of stream) seen.push(chunk as unknown as Record<string, unknown>);
  t.equal(seen[0]!.model, 'echo', 'the alias at the top');
  t.same(seen[0]!.x_meta, { model: 'demo-echo' }, 'the nested field as written');
  t.notOk('usage' in seen[0]!, 'the top-level usage: null goes');
  t.same(seen[0]!.y, { k: 1, usage: null }, 'the nested usage: null stays');
});
