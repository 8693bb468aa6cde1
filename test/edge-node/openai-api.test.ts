// The node's caller surface, exercised with the official openai client against a listening node
// and the fake upstream: answers, streams, model list, request ids, keys and the 4xx codes.
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import { APIError } from 'openai';
import type OpenAI from 'openai';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { CALLER_KEY, OTHER_CALLER_KEY, UPSTREAM_KEY, startNode, testConfig } from './node-harness.js';

const GENERATED_ID = /^req_[0-9A-HJKMNP-TV-Z]{26}$/;
const ECHO = '[zenova demo upstream] echo: ';

async function apiError(promise: Promise<unknown>): Promise<APIError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof APIError) return err;
    throw err;
  }
  throw new Error('expected the call to fail with an APIError');
}

t.test('the OpenAI surface against a listening node', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startNode(t, testConfig(upstream.url));
  const client = node.client();

  t.test('a non-streaming chat completion returns the echo under the alias, with a generated x-request-id', async (t) => {
    const before = upstream.requests.length;
    const { data, response } = await client.chat.completions
      .create({ model: 'echo', messages: [{ role: 'user', content: 'hello node' }] })
      .withResponse();
    t.equal(response.status, 200);
    t.equal(data.choices[0]?.message.content, `${ECHO}hello node`);
    t.equal(data.model, 'echo', 'the caller sees its alias, not the upstream model');
    t.ok(data.usage && data.usage.total_tokens > 0, 'usage is passed on');
    t.match(response.headers.get('x-request-id'), GENERATED_ID);

    const seen = upstream.requests.slice(before);
    t.equal(seen.length, 1);
    const forwarded = seen[0]!;
    t.equal(forwarded.path, '/v1/chat/completions');
    t.equal((forwarded.body as { model: string }).model, 'demo-echo', 'the upstream gets its own model name');
    t.equal(forwarded.headers.authorization, `Bearer ${UPSTREAM_KEY}`, 'the upstream gets the upstream key');
    t.notOk(JSON.stringify(forwarded.headers).includes(CALLER_KEY), "the caller's key never reaches the upstream");
    t.equal(forwarded.headers['x-request-id'], response.headers.get('x-request-id'), 'the upstream sees the same request id');
  });

  t.test('a streaming chat completion yields the content chunk by chunk and asks the upstream for usage', async (t) => {
    const before = upstream.requests.length;
    const { data: stream, response } = await client.chat.completions
      .create({ model: 'echo', messages: [{ role: 'user', content: 'stream me please' }], stream: true })
      .withResponse();
    t.match(response.headers.get('content-type'), /^text\/event-stream/);
    t.match(response.headers.get('x-request-id'), GENERATED_ID);
    const pieces: string[] = [];
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      t.equal(chunk.model, 'echo');
      t.ok(chunk.choices.length > 0, 'no usage-only chunk the caller did not ask for');
      t.notOk('usage' in chunk, 'no usage field the caller did not ask for');
      pieces.push(chunk.choices[0]?.delta.content ?? '');
    }
    t.ok(chunks > 3, 'the answer came in several chunks');
    t.equal(pieces.join(''), `${ECHO}stream me please`);
    const forwarded = upstream.requests[before]!.body as { stream: boolean; stream_options: { include_usage: boolean } };
    t.equal(forwarded.stream, true);
    t.same(forwarded.stream_options, { include_usage: true }, 'the upstream was asked for usage');
  });

  t.test("a caller that asks for usage gets the usage chunk, and its other stream options reach the upstream", async (t) => {
    const before = upstream.requests.length;
    const stream = await client.chat.completions.create({
      model: 'echo',
      messages: [{ role: 'user', content: 'count me' }],
      stream: true,
      stream_options: { include_usage: true, include_obfuscation: false },
    });
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
    t.ok(usage && usage.total_tokens > 0, 'the final chunk carries usage');
    t.same((upstream.requests[before]!.body as { stream_options: unknown }).stream_options, { include_usage: true, include_obfuscation: false });
  });

  t.test('the model list names the configured aliases', async (t) => {
    const { data: page, response } = await client.models.list().withResponse();
    t.same(page.data.map((m) => m.id), ['echo', 'echo-2']);
    t.match(response.headers.get('x-request-id'), GENERATED_ID);
    const one = await client.models.retrieve('echo-2');
    t.equal(one.id, 'echo-2');
  });

  t.test("a caller's well-formed x-request-id is echoed as x-client-request-id and logged beside the node's own id", async (t) => {
    const callerId = 'caller-trace.42:abc_DEF';
    const before = upstream.requests.length;
    const { response } = await client.chat.completions
      .create({ model: 'echo', messages: [{ role: 'user', content: 'id' }] }, { headers: { 'x-request-id': callerId } })
      .withResponse();
    const requestId = response.headers.get('x-request-id');
    t.match(requestId, GENERATED_ID, 'the request id is always minted by the node');
    t.equal(response.headers.get('x-client-request-id'), callerId);
    t.equal(upstream.requests[before]!.headers['x-request-id'], requestId);
    const finished = node.logs().find((line) => line.msg === 'request finished' && line.requestId === requestId);
    t.equal(finished?.clientRequestId, callerId, "the log line carries the caller's id too");
    t.equal(finished?.keyId, 'key-a', 'the log names the key by id');
  });

  t.test('a malformed x-request-id is neither kept nor echoed', async (t) => {
    for (const bad of ['has spaces in it', '-leading-dash', 'x'.repeat(129), 'semi;colon']) {
      const { response } = await client.models.list({ headers: { 'x-request-id': bad } }).withResponse();
      t.match(response.headers.get('x-request-id'), GENERATED_ID, `minted: ${bad.slice(0, 20)}`);
      t.equal(response.headers.get('x-client-request-id'), null, `not echoed: ${bad.slice(0, 20)}`);
    }
  });

  t.test('malformed JSON is rejected with ZN_ERR_INVALID_JSON', async (t) => {
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${CALLER_KEY}` },
      body: '{"model": "echo", "messages": [',
    });
    t.equal(res.status, 400);
    t.match(res.headers.get('x-request-id'), GENERATED_ID);
    t.same(await res.json(), { error: { message: 'The request body is not valid JSON.', type: 'invalid_request_error', param: null, code: 'ZN_ERR_INVALID_JSON' } });
  });

  t.test('a request without messages is rejected with ZN_ERR_INVALID_REQUEST naming the field', async (t) => {
    const err = await apiError(client.chat.completions.create({ model: 'echo' } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming));
    t.equal(err.status, 400);
    t.equal(err.code, 'ZN_ERR_INVALID_REQUEST');
    t.match(err.message, /messages/);
    t.match(err.headers?.get('x-request-id'), GENERATED_ID);
    const empty = await apiError(client.chat.completions.create({ model: 'echo', messages: [] }));
    t.equal(empty.code, 'ZN_ERR_INVALID_REQUEST');
    t.match(empty.message, /messages/);
  });

  t.test('an unknown model is rejected with ZN_ERR_MODEL_NOT_FOUND', async (t) => {
    const before = upstream.requests.length;
    const err = await apiError(client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }));
    t.equal(err.status, 404);
    t.equal(err.code, 'ZN_ERR_MODEL_NOT_FOUND');
    t.match(err.message, /no-such-model/);
    t.match(err.headers?.get('x-request-id'), GENERATED_ID);
    t.equal(upstream.requests.length, before, 'nothing went upstream');
  });

  t.test('a missing API key is rejected with ZN_ERR_API_KEY_MISSING', async (t) => {
    const res = await fetch(`${node.baseURL}/models`);
    t.equal(res.status, 401);
    t.match(res.headers.get('x-request-id'), GENERATED_ID);
    t.match(await res.json(), { error: { code: 'ZN_ERR_API_KEY_MISSING', type: 'authentication_error' } });
  });

  t.test('a wrong API key is rejected with ZN_ERR_API_KEY_INVALID, and malformed JSON is refused before any stage', async (t) => {
    const err = await apiError(node.client({ apiKey: 'zk-not-a-key' }).chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'x' }] }));
    t.equal(err.status, 401);
    t.equal(err.code, 'ZN_ERR_API_KEY_INVALID');
    t.match(err.headers?.get('x-request-id'), GENERATED_ID);
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer zk-not-a-key' },
      body: '{not json',
    });
    // Body limits and JSON parsing stay fastify's: such requests never enter the pipeline (docs/errors.md).
    t.match(await res.json(), { error: { code: 'ZN_ERR_INVALID_JSON' } }, 'JSON parsing comes before the pipeline');
  });

  t.test('a key presented as x-api-key is accepted, whatever the case of its stored hash', async (t) => {
    const res = await fetch(`${node.baseURL}/models`, { headers: { 'x-api-key': OTHER_CALLER_KEY } });
    t.equal(res.status, 200);
  });

  t.test('an unknown route answers ZN_ERR_NOT_FOUND with an x-request-id', async (t) => {
    const res = await fetch(`${node.baseURL}/no/such/route?secret=1`, { method: 'POST' });
    t.equal(res.status, 404);
    t.match(res.headers.get('x-request-id'), GENERATED_ID);
    const body = (await res.json()) as { error: { code: string; message: string } };
    t.equal(body.error.code, 'ZN_ERR_NOT_FOUND');
    t.notMatch(body.error.message, /secret/, 'the query string is not echoed');
  });

  t.test('a body that is not JSON is rejected with ZN_ERR_INVALID_REQUEST', async (t) => {
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain', authorization: `Bearer ${CALLER_KEY}` },
      body: 'hello',
    });
    t.equal(res.status, 400);
    t.match(await res.json(), { error: { code: 'ZN_ERR_INVALID_REQUEST' } });
  });

  t.test('a URL that cannot be decoded and a request that is not HTTP still get an error body with an x-request-id', async (t) => {
    const res = await fetch(`${node.baseURL}/%zz`);
    t.equal(res.status, 400);
    t.match(res.headers.get('x-request-id'), GENERATED_ID);
    t.match(await res.json(), { error: { code: 'ZN_ERR_INVALID_REQUEST' } });

    const { port } = new URL(node.origin);
    const raw = await new Promise<string>((resolve, reject) => {
      let answer = '';
      const socket = net.connect(Number(port), '127.0.0.1', () => socket.write('NOT HTTP AT ALL\r\n\r\n'));
      socket.setEncoding('utf8');
      socket.on('data', (chunk: string) => (answer += chunk));
      socket.on('close', () => resolve(answer));
      socket.on('error', reject);
    });
    t.match(raw, /^HTTP\/1\.1 400 /);
    t.match(raw, /\r\nx-request-id: req_[0-9A-Z]{26}\r\n/);
    t.match(raw, /"code":"ZN_ERR_INVALID_REQUEST"/);
  });

  t.test('the liveness probe answers ok without a key', async (t) => {
    const res = await fetch(`${node.origin}/healthz`);
    t.equal(res.status, 200);
    t.same(await res.json(), { status: 'ok' });
    t.match(res.headers.get('x-request-id'), GENERATED_ID);
  });

  t.test('neither the caller key nor the upstream key was ever logged', async (t) => {
    await client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'log check' }] });
    const all = node.logLines.join('\n');
    t.ok(node.logLines.length > 0);
    t.notOk(all.includes(CALLER_KEY), 'caller key absent');
    t.notOk(all.includes(UPSTREAM_KEY), 'upstream key absent');
  });
});

t.test('a body over the configured limit is rejected with 413 ZN_ERR_BODY_TOO_LARGE', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startNode(t, testConfig(upstream.url, { limits: { maxBodyBytes: 1024 } }));
  const err = await apiError(node.client().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'x'.repeat(4096) }] }));
  t.equal(err.status, 413);
  t.equal(err.code, 'ZN_ERR_BODY_TOO_LARGE');
  t.match(err.headers?.get('x-request-id'), GENERATED_ID);
  t.equal(upstream.requests.length, 0, 'nothing went upstream');
  const small = await node.client().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'small' }] });
  t.equal(small.choices[0]?.message.content, `${ECHO}small`, 'a body under the limit still passes');
});

/** One request to 127.0.0.1:port naming `host` in its Host header (fetch does not let a caller set it). */
function sendWithHost(port: string, host: string, method: string, path: string, body?: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers: { ...headers, host, ...(body === undefined ? {} : { 'content-type': 'application/json' }) } }, (answer) => {
      let text = '';
      answer.setEncoding('utf8').on('data', (chunk: string) => (text += chunk)).on('end', () => resolve({ status: answer.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

t.test('without apiKeys in the config the node serves callers without a key, only requests addressed to a loopback host', async (t) => {
  const upstream = await startFakeUpstream(t);
  const config = testConfig(upstream.url);
  delete config.apiKeys;
  const node = await startNode(t, config);
  const res = await fetch(`${node.baseURL}/models`);
  t.equal(res.status, 200);

  // A web page that rebinds its own name to 127.0.0.1 reaches the port, but its requests name its host.
  const port = new URL(node.origin).port;
  const send = (host: string, method: string, path: string, body?: string): Promise<{ status: number; body: string }> => sendWithHost(port, host, method, path, body);
  const chat = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'from a rebound page' }] });
  const before = upstream.requests.length;
  for (const host of ['evil.example', `evil.example:${port}`, `127.0.0.1.evil.example:${port}`]) {
    const refused = await send(host, 'POST', '/v1/chat/completions', chat);
    t.equal(refused.status, 421, `Host ${host}: 421`);
    t.equal(JSON.parse(refused.body).error.code, 'ZN_ERR_MISDIRECTED_REQUEST');
    t.equal((await send(host, 'GET', '/v1/models')).status, 421, `Host ${host}: the model list too`);
  }
  t.equal(upstream.requests.length, before, 'nothing went upstream with its key');
  for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, 'localhost']) {
    t.equal((await send(host, 'POST', '/v1/chat/completions', chat)).status, 200, `Host ${host} is served`);
  }
});

t.test('with apiKeys the Host header is not checked: a key is the gate', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startNode(t, testConfig(upstream.url));
  const res = await sendWithHost(new URL(node.origin).port, 'gateway.example.com', 'GET', '/v1/models', undefined, { authorization: `Bearer ${CALLER_KEY}` });
  t.equal(res.status, 200);
});
