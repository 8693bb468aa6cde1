// A client given an endpoint's full URL as its Base URL (`<node>/v1/chat/completions` in an OpenAI
// client, `<node>/v1/messages` in an Anthropic one) appends the endpoint again: its 404 (still
// ZN_ERR_NOT_FOUND) says the Base URL includes the endpoint path and what to drop, in each SDK's
// own error shape; following the advice serves the call. Paths that only look alike keep the plain answer.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { anthropicSdkError } from './anthropic-fixtures.js';
import { sdkError, startPipelineNode, withClaudeRoute } from './pipeline/pipeline-harness.js';

t.test('a Base URL that includes the endpoint path is named in the 404', async (t) => {
  const upstream = await startFakeUpstream(t);
  const anthropic = await startFakeAnthropicUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, bundle: (base) => withClaudeRoute(base, anthropic.url) });
  const chat = { model: 'echo', messages: [{ role: 'user' as const, content: 'hi' }] };
  const message = { model: 'claude', max_tokens: 10, messages: [{ role: 'user' as const, content: 'hi' }] };
  const openai = (baseURL: string): OpenAI => new OpenAI({ baseURL, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
  const claude = (baseURL: string): Anthropic => new Anthropic({ baseURL, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });

  t.test('an OpenAI client given …/v1/chat/completions is told to drop /chat/completions', async (t) => {
    const err = await sdkError(openai(`${node.baseURL}/chat/completions`).chat.completions.create(chat));
    t.equal(err.status, 404);
    t.equal(err.code, 'ZN_ERR_NOT_FOUND');
    t.match(
      err.message,
      /No route for POST \/v1\/chat\/completions\/chat\/completions: the client's Base URL includes the endpoint path \/v1\/chat\/completions: the client adds the endpoint path itself \(here \/chat\/completions\)\. Drop \/chat\/completions from the client's Base URL\. OpenAI clients take http\(s\):\/\/<node>:<port>\/v1/,
    );
    const embeddings = await sdkError(openai(`${node.baseURL}/embeddings`).embeddings.create({ model: 'echo', input: 'hi' }));
    t.match(embeddings.message, /includes the endpoint path \/v1\/embeddings: .*\(here \/embeddings\)\. Drop \/embeddings from the client's Base URL\./);
    const models = await sdkError(openai(`${node.baseURL}/chat/completions`).models.list());
    t.match(models.message, /No route for GET \/v1\/chat\/completions\/models: .*includes the endpoint path \/v1\/chat\/completions: .*Drop \/chat\/completions/);
    const noV1 = await sdkError(openai(`${node.origin}/chat/completions`).chat.completions.create(chat));
    t.match(noV1.message, /includes the endpoint path \/chat\/completions: .*Drop \/chat\/completions from the client's Base URL and add \/v1\./);
    t.equal((await openai(node.baseURL).chat.completions.create(chat)).object, 'chat.completion', 'with …/v1, as the message says, the call is served');
  });

  t.test('an Anthropic client given <origin>/v1/messages is told to drop /v1/messages, in its own error shape', async (t) => {
    const err = await anthropicSdkError(claude(`${node.origin}/v1/messages`).messages.create(message));
    t.equal(err.status, 404);
    t.equal(err.errorCode, 'ZN_ERR_NOT_FOUND', 'the SDK reads our code from the Anthropic-shaped body');
    t.match(
      err.message,
      /No route for POST \/v1\/messages\/v1\/messages: the client's Base URL includes the endpoint path \/v1\/messages: the client adds the endpoint path itself \(here \/v1\/messages\)\. Drop \/v1\/messages from the client's Base URL\./,
    );
    t.equal((await claude(node.origin).messages.create(message)).model, 'claude', 'with the origin, as the message says, the call is served');
  });

  t.test('paths that only look alike keep the plain answer', async (t) => {
    const send = async (method: string, path: string): Promise<string> => {
      const res = await fetch(node.origin + path, { method, headers: { authorization: `Bearer ${node.secret}`, ...(method === 'POST' ? { 'content-type': 'application/json' } : {}) }, ...(method === 'POST' ? { body: '{}' } : {}) });
      t.equal(res.status, 404, path);
      return ((await res.json()) as { error: { message: string } }).error.message;
    };
    t.equal(await send('POST', '/v1/chat/completions/nothing?api-key=not-echoed'), 'No route for POST /v1/chat/completions/nothing.');
    // The appended path must be a route for the method: GET /v1/chat/completions is none, so no advice.
    t.equal(await send('GET', '/v1/embeddings/chat/completions'), 'No route for GET /v1/embeddings/chat/completions.');
    t.equal(await send('POST', '/v1/chat/completionsx/chat/completions'), 'No route for POST /v1/chat/completionsx/chat/completions.');
  });
});
