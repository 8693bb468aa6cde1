// The OpenAI APIs through the full pipeline, driven by the official `openai` client against the
// fake upstream with a bundle-built config: chat (JSON and streamed), embeddings, models.
import t from 'tap';
import { DEMO_REPLY_PREFIX } from '../../control-plane/src/dev-stack/demo-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { UPSTREAM_SECRET, bundleKey, newCallerKey } from './config-fixtures.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';

t.test('the openai client against a node serving a bundle', async (t) => {
  const upstream = await startFakeUpstream(t);
  const narrow = newCallerKey();
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base) => ({
      apiKeys: [...base.apiKeys, bundleKey('key-narrow', narrow.sha256, { allowedModels: ['echo-2'] })],
      routes: [
        ...base.routes,
        { alias: 'embed', targets: [{ upstream: 'demo', model: 'demo-embed', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 },
      ],
    }),
  });
  const client = node.client();

  t.test('a chat completion answers under the alias with the upstream usage, and the upstream gets its own model and secret', async (t) => {
    const before = upstream.requests.length;
    const { data, response } = await client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'hi there' }] }).withResponse();
    t.equal(data.choices[0]?.message.content, `${DEMO_REPLY_PREFIX}hi there`);
    t.equal(data.model, 'echo');
    t.ok(data.usage !== undefined && data.usage.prompt_tokens > 0);
    const sent = upstream.requests[before]!;
    t.equal((sent.body as { model: string }).model, 'demo-echo');
    t.equal(sent.headers.authorization, `Bearer ${UPSTREAM_SECRET}`);
    t.equal(sent.headers['x-request-id'], response.headers.get('x-request-id'));
    const done = node.finished.find((f) => f.requestId === response.headers.get('x-request-id'))!;
    t.same(done.usage, { inputTokens: data.usage!.prompt_tokens, outputTokens: data.usage!.completion_tokens, estimated: false }, 'metered from the upstream usage');
    t.equal(done.outcome.status, 'ok');
  });

  t.test('a stream arrives chunk by chunk without the usage chunk the caller did not ask for, and is metered from it', async (t) => {
    const before = upstream.requests.length;
    const { data: stream, response } = await client.chat.completions
      .create({ model: 'echo', messages: [{ role: 'user', content: 'stream this please' }], stream: true })
      .withResponse();
    let text = '';
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      t.equal(chunk.model, 'echo');
      t.ok(chunk.choices.length > 0, 'every chunk the caller sees has choices');
      t.notOk('usage' in chunk, 'no usage field the caller did not ask for');
      text += chunk.choices[0]?.delta.content ?? '';
    }
    t.ok(chunks > 3);
    t.equal(text, `${DEMO_REPLY_PREFIX}stream this please`);
    t.match(upstream.requests[before]!.body, { stream: true, stream_options: { include_usage: true } }, 'the node asks the upstream for usage');
    const done = node.finished.find((f) => f.requestId === response.headers.get('x-request-id'))!;
    t.equal(done.usage.estimated, false);
    t.ok(done.usage.outputTokens > 0);
  });

  t.test('a caller who asks for stream usage gets the usage chunk', async (t) => {
    const stream = await client.chat.completions.create({
      model: 'echo',
      messages: [{ role: 'user', content: 'count me' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage: unknown;
    for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
    t.match(usage, { prompt_tokens: Number, completion_tokens: Number });
  });

  t.test('embeddings are forwarded and metered from usage.prompt_tokens', async (t) => {
    const { data, response } = await client.embeddings.create({ model: 'embed', input: ['one', 'two'] }).withResponse();
    t.equal(data.data.length, 2);
    t.equal(data.data[0]?.embedding.length, 8);
    t.equal(data.model, 'embed');
    const done = node.finished.find((f) => f.requestId === response.headers.get('x-request-id'))!;
    t.same(done.usage, { inputTokens: data.usage.prompt_tokens, outputTokens: 0, estimated: false });
  });

  t.test('the model list shows only what the key may use, and one model can be fetched', async (t) => {
    const all = [];
    for await (const model of client.models.list()) all.push(model.id);
    t.same(all, ['echo', 'echo-2', 'embed']);
    const narrowClient = node.client({ apiKey: narrow.secret });
    const mine = [];
    for await (const model of narrowClient.models.list()) mine.push(model.id);
    t.same(mine, ['echo-2']);
    t.equal((await narrowClient.models.retrieve('echo-2')).id, 'echo-2');
    const before = upstream.requests.length;
    await t.rejects(narrowClient.models.retrieve('echo'), { status: 403, code: 'ZN_ERR_MODEL_NOT_ALLOWED' });
    t.equal(upstream.requests.length, before, 'the node answers model lists itself');
  });

  t.test("a caller's well-formed x-request-id comes back as x-client-request-id beside the node's own id", async (t) => {
    const before = upstream.requests.length;
    const { response } = await client.chat.completions
      .create({ model: 'echo', messages: [{ role: 'user', content: 'x' }] }, { headers: { 'x-request-id': 'trace-42.abc' } })
      .withResponse();
    t.equal(response.headers.get('x-client-request-id'), 'trace-42.abc');
    t.match(response.headers.get('x-request-id'), /^req_/);
    t.equal(upstream.requests[before]!.headers['x-request-id'], response.headers.get('x-request-id'));
  });
});
