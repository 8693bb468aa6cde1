import OpenAI from 'openai';
import t from 'tap';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';

const PREFIX = '[zenova demo upstream] echo: ';

function client(baseURL: string, extra: { timeout?: number } = {}): OpenAI {
  return new OpenAI({ apiKey: 'sk-test-upstream-secret', baseURL, maxRetries: 0, ...extra });
}

t.test('the fake upstream answers the official openai client without streaming', async (t) => {
  const upstream = await startFakeUpstream(t);
  t.match(upstream.url, /^http:\/\/127\.0\.0\.1:\d+\/v1$/);
  const { data, response } = await client(upstream.url).chat.completions.create({
    model: 'demo-echo',
    messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hello there' }],
  }).withResponse();
  t.equal(response.headers.get('x-zenova-demo-upstream'), '1');
  t.equal(data.object, 'chat.completion');
  t.equal(data.model, 'demo-echo');
  t.equal(data.choices[0]?.message.content, `${PREFIX}hello there`);
  t.equal(data.choices[0]?.finish_reason, 'stop');
  // ceil(chars/4): "be brief"+"hello there" = 19 chars -> 5; the reply is 40 chars -> 10.
  t.same(data.usage, { prompt_tokens: 5, completion_tokens: 10, total_tokens: 15 });

  t.equal(upstream.requests.length, 1);
  const recorded = upstream.requests[0]!;
  t.equal(recorded.method, 'POST');
  t.equal(recorded.path, '/v1/chat/completions');
  t.equal(recorded.headers.authorization, 'Bearer sk-test-upstream-secret', 'headers are recorded as received');
  t.match(recorded.body, { model: 'demo-echo', messages: [{ role: 'system' }, { role: 'user', content: 'hello there' }] });
});

t.test('the fake upstream streams chunks and a final usage chunk when include_usage is set', async (t) => {
  const upstream = await startFakeUpstream(t);
  const stream = await client(upstream.url).chat.completions.create({
    model: 'demo-echo',
    messages: [{ role: 'user', content: [{ type: 'text', text: 'stream me please' }] }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let contentChunks = 0;
  let role: string | undefined;
  let finish: string | null | undefined;
  let usage: OpenAI.CompletionUsage | null | undefined;
  let emptyChoiceChunks = 0;
  for await (const chunk of stream) {
    t.equal(chunk.object, 'chat.completion.chunk');
    const choice = chunk.choices[0];
    if (!choice) {
      emptyChoiceChunks++;
      usage = chunk.usage;
      continue;
    }
    role ??= choice.delta.role;
    if (choice.delta.content) {
      text += choice.delta.content;
      contentChunks++;
    }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  t.equal(role, 'assistant');
  t.equal(text, `${PREFIX}stream me please`);
  t.ok(contentChunks > 2, 'the content comes in several chunks');
  t.equal(finish, 'stop');
  t.equal(emptyChoiceChunks, 1, 'one usage chunk with empty choices');
  // 'stream me please' is 16 chars -> 4 tokens; the 45-char reply -> 12.
  t.same(usage, { prompt_tokens: 4, completion_tokens: 12, total_tokens: 16 });
});

t.test('the fake upstream sends no usage chunk unless asked, and none at all with omitUsage', async (t) => {
  const upstream = await startFakeUpstream(t);
  const countUsageChunks = async (includeUsage: boolean): Promise<number> => {
    const stream = await client(upstream.url).chat.completions.create({
      model: 'demo-echo', messages: [{ role: 'user', content: 'x' }], stream: true,
      ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
    });
    let n = 0;
    for await (const chunk of stream) if (chunk.usage) n++;
    return n;
  };
  t.equal(await countUsageChunks(false), 0);
  t.equal(await countUsageChunks(true), 1);
  upstream.setBehaviour({ omitUsage: true });
  t.equal(await countUsageChunks(true), 0);
  const plain = await client(upstream.url).chat.completions.create({ model: 'demo-echo', messages: [{ role: 'user', content: 'x' }] });
  t.equal(plain.usage, undefined);
});

t.test('failNext answers the next N requests with an OpenAI-style error, then recovers', async (t) => {
  const upstream = await startFakeUpstream(t, { failNext: { count: 2, status: 503 } });
  const openai = client(upstream.url);
  const ask = () => openai.chat.completions.create({ model: 'demo-echo', messages: [{ role: 'user', content: 'hi' }] });
  for (let i = 0; i < 2; i++) {
    const err = await ask().then(() => undefined, (e: unknown) => e);
    t.ok(err instanceof OpenAI.APIError, `failure ${i + 1} is an API error`);
    t.equal((err as InstanceType<typeof OpenAI.APIError>).status, 503);
    t.match((err as InstanceType<typeof OpenAI.APIError>).error, { message: /demo upstream failure/, type: 'server_error', code: 'demo_upstream_failure' });
  }
  t.equal((await ask()).choices[0]?.message.content, `${PREFIX}hi`);

  upstream.setBehaviour({ failNext: { count: 1, status: 429, body: { error: { message: 'slow down', type: 'rate_limit_error', code: 'rate_limited' } } } });
  const custom = await ask().then(() => undefined, (e: unknown) => e);
  t.match(custom, { status: 429, error: { message: 'slow down', code: 'rate_limited' } }, 'a configured body is sent as is');
  t.equal(upstream.requests.length, 4);
});

t.test('latencyMs holds back the first byte', async (t) => {
  const upstream = await startFakeUpstream(t, { latencyMs: 30_000 });
  // Without the latency this answers in milliseconds; with it the client gives up first.
  await t.rejects(
    client(upstream.url, { timeout: 1_000 }).chat.completions.create({ model: 'demo-echo', messages: [{ role: 'user', content: 'hi' }] }),
    { message: /timed out/i },
  );
  t.equal(upstream.requests.length, 1, 'the request itself arrived');
});

t.test('chunkDelayMs holds back the chunks after the first', async (t) => {
  const upstream = await startFakeUpstream(t, { chunkDelayMs: 30_000 });
  const stream = await client(upstream.url).chat.completions.create({ model: 'demo-echo', messages: [{ role: 'user', content: 'hi' }], stream: true });
  const iterator = stream[Symbol.asyncIterator]();
  const first = await iterator.next();
  t.equal(first.value?.choices[0]?.delta.role, 'assistant', 'the first chunk is sent at once');
  // The second is 30 s away: it must still be pending while a 200 ms timer fires.
  const second = iterator.next();
  const winner = await Promise.race([second.then(() => 'chunk'), new Promise((resolve) => setTimeout(() => resolve('timer'), 200))]);
  t.equal(winner, 'timer');
  second.catch(() => undefined);
  stream.controller.abort();
});

t.test('dropStreamAfterChunks breaks the stream without [DONE]', async (t) => {
  const upstream = await startFakeUpstream(t, { dropStreamAfterChunks: 2 });
  const stream = await client(upstream.url).chat.completions.create({ model: 'demo-echo', messages: [{ role: 'user', content: 'a long enough message' }], stream: true });
  let received = 0;
  let finished = false;
  const err = await (async () => {
    for await (const chunk of stream) {
      received++;
      if (chunk.choices[0]?.finish_reason) finished = true;
    }
  })().then(() => undefined, (e: unknown) => e);
  t.ok(err, 'the client sees the stream break');
  t.equal(received, 2);
  t.notOk(finished);
});

t.test('embeddings are deterministic vectors with token usage, as floats or base64', async (t) => {
  const upstream = await startFakeUpstream(t);
  const openai = client(upstream.url);
  // The openai client asks for base64 by default and decodes it.
  const first = await openai.embeddings.create({ model: 'demo-embed', input: ['alpha', 'beta gamma'] });
  const again = await openai.embeddings.create({ model: 'demo-embed', input: 'alpha', encoding_format: 'float' });
  t.equal(first.data.length, 2);
  t.equal(first.data[0]?.embedding.length, 8);
  t.notSame(first.data[0]?.embedding, first.data[1]?.embedding);
  const viaBase64 = first.data[0]!.embedding;
  const viaFloat = again.data[0]!.embedding;
  viaFloat.forEach((v, i) => t.ok(Math.abs(v - viaBase64[i]!) < 1e-6, `dimension ${i} agrees`));
  t.same(first.usage, { prompt_tokens: 2 + 3, total_tokens: 5 });
});

t.test('the fake upstream lists its models', async (t) => {
  const upstream = await startFakeUpstream(t);
  const models = [];
  for await (const model of client(upstream.url).models.list()) models.push(model);
  t.same(models.map((m) => m.id), ['demo-echo', 'demo-embed']);
  t.match(models[0], { object: 'model', owned_by: 'zenova-demo' });
});

t.test('bad requests get 400 and unknown paths 404, OpenAI-style and labelled', async (t) => {
  const upstream = await startFakeUpstream(t);
  const badBody = await fetch(`${upstream.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'demo-echo' }) });
  t.equal(badBody.status, 400);
  t.equal(badBody.headers.get('x-zenova-demo-upstream'), '1');
  t.match(await badBody.json(), { error: { message: /messages/, type: 'invalid_request_error' } });

  const notJson = await fetch(`${upstream.url}/chat/completions`, { method: 'POST', body: '{nope' });
  t.equal(notJson.status, 400);
  t.match(await notJson.json(), { error: { message: /not valid JSON/ } });

  const missing = await fetch(`${upstream.url}/nothing-here`);
  t.equal(missing.status, 404);
  t.equal(missing.headers.get('x-zenova-demo-upstream'), '1');
  t.match(await missing.json(), { error: { type: 'invalid_request_error', code: 'unknown_url' } });
});

t.test('close() ends even with keep-alive connections open', async (t) => {
  const upstream = await startFakeUpstream();
  await client(upstream.url).models.list();
  await upstream.close();
  await waitFor(async () => fetch(`${upstream.url}/models`).then(() => false, () => true), { what: 'the port to refuse connections', timeoutMs: 5_000 });
  t.pass('closed');
});
