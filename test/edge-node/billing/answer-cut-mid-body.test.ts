// An upstream that had the whole request, answered 200 and then broke the connection while sending
// its JSON body did the work (a JSON answer comes only once the model is done) and bills it, as one
// whose body stalls past the timeout does: the node does not send it there again (neither the
// route's retries nor, told by `x-should-retry: false`, the SDK's), charges the prompt, and says
// the connection broke mid-answer rather than that the upstream could not be reached. Another
// target may still answer. A reset before the headers stays a retryable connect error, charged
// nothing (docs/node-api.md "Routing", docs/billing.md "Stage settle").
import type net from 'node:net';
import OpenAI from 'openai';
import t from 'tap';
import { chatCompletionJson } from '../../fixtures/canned-answers.js';
import { startRawUpstream } from '../../fixtures/raw-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { sdkError } from '../pipeline/pipeline-harness.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';
import { pricedNode } from './priced-node.js';

const PROMPT = 'Name the rivers the Grand Canal crosses between Hangzhou and Beijing.';

/** The official client with its own retries on, as callers run it. */
function sdk(node: PipelineNode): OpenAI {
  return new OpenAI({ baseURL: node.baseURL, apiKey: node.secret, maxRetries: 2, timeout: 20_000 });
}

function ask(client: OpenAI): Promise<unknown> {
  return client.chat.completions.create({ model: 'echo', max_tokens: 50, messages: [{ role: 'user', content: PROMPT }] });
}

/** 200, its headers and the first part of a JSON answer, then a reset. */
function answerThenReset(socket: net.Socket): void {
  const body = chatCompletionJson('The Qiantang, the Yangtze, the Huai and the Yellow River.', { prompt_tokens: 30, completion_tokens: 12 });
  socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`);
  socket.write(body.slice(0, Math.floor(body.length / 2)), () => setImmediate(() => socket.resetAndDestroy()));
}

for (const retries of [0, 2]) {
  t.test(`an answer whose connection resets mid-body is sent to the upstream once (route retries ${retries}, SDK retries 2), not retryable, and charged the prompt`, async (t) => {
    const up = await startRawUpstream(t, answerThenReset);
    const { node, finished } = await pricedNode(t, up.url, { route: (route) => ({ ...route, retries }) });
    const err = await sdkError(ask(sdk(node)));
    t.equal(err.status, 502);
    t.equal(err.code, 'ZN_ERR_UPSTREAM_UNAVAILABLE');
    t.equal(err.headers?.get('x-should-retry'), 'false', 'a resend would be billed again');
    t.match(err.message, /Upstream "demo" closed the connection while sending its answer \(\w+\); it may have billed the request, so it is not retried\./);
    t.notMatch(err.message, /could not be reached/);
    const f = await waitFor(() => finished[0], { what: 'the record' });
    t.equal(up.requests, 1, 'neither the route nor the SDK sent it again');
    t.equal(finished.length, 1, 'the SDK made one request to the node');
    t.equal(f.status, 'failed');
    t.equal(f.upstream, 'demo', 'recorded against the upstream that did the work');
    t.ok(f.usage.inputTokens >= PROMPT.length / 4, 'the prompt is estimated');
    t.same(f.usage, { inputTokens: f.usage.inputTokens, outputTokens: 0, estimated: true });
    t.equal(f.cost.costMicros, f.usage.inputTokens, 'the prompt at its price');
  });
}

t.test('after an answer cut mid-body, a fallback target still answers and its own usage is charged', async (t) => {
  const up = await startRawUpstream(t, (socket, request) => {
    if (!request.includes('"demo-backup"')) return answerThenReset(socket);
    const body = chatCompletionJson('Four.', { prompt_tokens: 40, completion_tokens: 3 });
    socket.end(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
  });
  const { node, finished } = await pricedNode(t, up.url, { route: (route) => ({ ...route, retries: 2, fallbacks: [{ upstream: 'demo', model: 'demo-backup' }] }) });
  const answer = (await ask(sdk(node))) as { choices: { message: { content: string } }[] };
  t.equal(answer.choices[0]?.message.content, 'Four.');
  t.equal(up.requests, 2, 'the cut target once, then the fallback');
  const f = await waitFor(() => finished[0], { what: 'the record' });
  t.equal(f.status, 'ok');
  t.same(f.usage, { inputTokens: 40, outputTokens: 3, estimated: false });
  t.equal(f.cost.costMicros, 40 + 3 * 10);
});

t.test('a reset before the answer’s headers is still a retryable connect error, retried by the route and charged nothing', async (t) => {
  const up = await startRawUpstream(t, (socket) => {
    socket.resetAndDestroy();
  });
  const { node, finished } = await pricedNode(t, up.url, { route: (route) => ({ ...route, retries: 1 }) });
  const client = new OpenAI({ baseURL: node.baseURL, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
  const err = await sdkError(ask(client));
  t.equal(err.status, 502);
  t.equal(err.code, 'ZN_ERR_UPSTREAM_UNAVAILABLE');
  t.equal(err.headers?.get('x-should-retry'), 'true');
  t.equal(up.requests, 2, 'the route’s retry was made');
  const f = await waitFor(() => finished[0], { what: 'the record' });
  t.equal(f.upstream, undefined);
  t.equal(f.cost.costMicros, 0);
});

t.test('an answer whose body stalls after its 2xx headers is sent to the upstream once, not retried on that target, and charged the prompt', async (t) => {
  const stalled: net.Socket[] = [];
  const up = await startRawUpstream(t, (socket) => {
    const body = chatCompletionJson('The Qiantang and the Yangtze.', { prompt_tokens: 30, completion_tokens: 8 });
    socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body.slice(0, 20)}`);
    stalled.push(socket);
  });
  t.teardown(() => { for (const socket of stalled) socket.destroy(); });
  const { node, finished } = await pricedNode(t, up.url, { route: (route) => ({ ...route, retries: 2, timeoutMs: 300 }) });
  const err = await sdkError(ask(sdk(node)));
  t.equal(err.status, 504);
  t.equal(err.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
  t.equal(err.headers?.get('x-should-retry'), 'false');
  t.equal(up.requests, 1, 'neither the route nor the SDK sent it again');
  const f = await waitFor(() => finished[0], { what: 'the record' });
  t.equal(f.upstream, 'demo');
  t.equal(f.cost.costMicros, f.usage.inputTokens, 'the prompt at its price');
});
