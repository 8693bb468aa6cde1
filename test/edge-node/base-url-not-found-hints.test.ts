// A request that misses every route because of the client's Base URL is told how to fix it: /v1
// twice (an Anthropic SDK given `<origin>/v1`, which appends /v1/messages itself) says to drop
// /v1, in Anthropic's shape on /v1/v1/messages and OpenAI's elsewhere; a node route asked for
// without /v1 says to add it, and one with a // in front (a Base URL ending in /) to drop that /;
// any other path gets the plain answer, never its query string.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { anthropicSdkError } from './anthropic-fixtures.js';
import { sdkError, startPipelineNode, withClaudeRoute } from './pipeline/pipeline-harness.js';

const REQUEST_ID = /^req_[0-9A-HJKMNP-TV-Z]{26}$/;
const DROP_V1 = /\/v1 is in the path twice\. Drop \/v1 from the client's Base URL\. OpenAI clients take http\(s\):\/\/<node>:<port>\/v1 as their Base URL, Anthropic clients the origin/;

t.test('not-found answers that name the Base URL mistake', async (t) => {
  const upstream = await startFakeUpstream(t);
  const anthropic = await startFakeAnthropicUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, bundle: (base) => withClaudeRoute(base, anthropic.url) });
  const message = { model: 'claude', max_tokens: 10, messages: [{ role: 'user' as const, content: 'hi' }] };
  const send = (method: string, path: string): Promise<Response> =>
    fetch(node.origin + path, { method, headers: { authorization: `Bearer ${node.secret}`, ...(method === 'POST' ? { 'content-type': 'application/json' } : {}) }, ...(method === 'POST' ? { body: '{}' } : {}) });
  const errorOf = async (res: Response): Promise<{ message: string; code: string }> => ((await res.json()) as { error: { message: string; code: string } }).error;

  t.test('an Anthropic SDK given <origin>/v1 as Base URL gets ZN_ERR_NOT_FOUND in its own shape, saying to drop /v1', async (t) => {
    const wrong = new Anthropic({ baseURL: node.baseURL, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
    const err = await anthropicSdkError(wrong.messages.create(message));
    t.equal(err.status, 404);
    t.equal(err.errorCode, 'ZN_ERR_NOT_FOUND', 'the SDK reads our code from the Anthropic-shaped body');
    t.match(err.requestID, REQUEST_ID, 'request-id, the header the SDK reads, is set');
    t.match(err.message, /No route for POST \/v1\/v1\/messages: /);
    t.match(err.message, DROP_V1);
    const right = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
    t.equal((await right.messages.create(message)).model, 'claude', 'with the origin as Base URL, as the message says, the call is served');
  });

  t.test('an OpenAI client whose Base URL has /v1 twice gets the same advice in OpenAI\'s shape', async (t) => {
    const doubled = new OpenAI({ baseURL: `${node.baseURL}/v1`, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
    const err = await sdkError(doubled.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }));
    t.equal(err.status, 404);
    t.equal(err.code, 'ZN_ERR_NOT_FOUND');
    t.match(err.message, DROP_V1);
    const list = await send('GET', '/v1/v1/models?api-key=not-echoed');
    t.equal(list.status, 404);
    const body = await errorOf(list);
    t.match(body, { code: 'ZN_ERR_NOT_FOUND', message: /^No route for GET \/v1\/v1\/models: / });
    t.notMatch(body.message, /not-echoed/, 'the query string is never quoted');
  });

  t.test('a node route asked for without /v1 is told to add /v1 to the Base URL', async (t) => {
    const noV1 = new OpenAI({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
    const err = await sdkError(noV1.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }));
    t.equal(err.status, 404);
    t.equal(err.code, 'ZN_ERR_NOT_FOUND');
    t.match(err.message, /No route for POST \/chat\/completions: the node serves it as POST \/v1\/chat\/completions\. Add \/v1 to the client's Base URL\. OpenAI clients take http\(s\):\/\/<node>:<port>\/v1/);
    for (const [method, path] of [
      ['POST', '/embeddings'],
      ['POST', '/messages'],
      ['GET', '/models'],
      ['GET', '/models/org/model-x'],
    ] as const) {
      const res = await send(method, `${path}?api-key=not-echoed`);
      t.equal(res.status, 404, path);
      const body = await errorOf(res);
      t.equal(body.code, 'ZN_ERR_NOT_FOUND', path);
      t.ok(body.message.startsWith(`No route for ${method} ${path}: the node serves it as ${method} /v1${path}. Add /v1`), body.message);
      t.notMatch(body.message, /not-echoed/, path);
    }
    // Not a route under /v1 either (wrong method, unknown path): the plain answer, no advice to follow.
    t.equal((await errorOf(await send('GET', '/chat/completions'))).message, 'No route for GET /chat/completions.');
    t.equal((await errorOf(await send('GET', '/v1/nothing?api-key=not-echoed'))).message, 'No route for GET /v1/nothing.');
  });

  t.test('a path starting with // (a Base URL ending in / joined with /v1/…) is told to drop that /, in Anthropic\'s shape on //v1/messages', async (t) => {
    const SLASH = /the path starts with more than one \/\. Drop the \/ at the end of the client's Base URL\./;
    for (const [method, path] of [['POST', '//v1/chat/completions'], ['GET', '//v1/models'], ['POST', '//v1/embeddings']] as const) {
      const res = await send(method, path);
      t.equal(res.status, 404, path);
      t.match(await errorOf(res), { code: 'ZN_ERR_NOT_FOUND', message: SLASH }, path);
    }
    const messages = await send('POST', '//v1/messages');
    t.equal(messages.status, 404);
    t.match(messages.headers.get('request-id'), REQUEST_ID, 'request-id, the header the Anthropic SDK reads');
    t.match(await messages.json(), { type: 'error', error: { type: 'not_found_error', code: 'ZN_ERR_NOT_FOUND', message: SLASH } }, 'in Anthropic\'s shape');
    t.equal((await errorOf(await send('GET', '//nothing'))).message, 'No route for GET //nothing.', 'not a route with one / either: the plain answer');
    // An OpenAI client given `<origin>/`: both mistakes, each with its fix.
    t.match(await errorOf(await send('POST', '//chat/completions')), { message: /^No route for POST \/\/chat\/completions: the path starts with more than one \/\. Drop the \/ at the end of the client's Base URL\. Also: the node serves it as POST \/v1\/chat\/completions\. Add \/v1 to the client's Base URL\./ });
    t.match(await errorOf(await send('POST', '//v1/v1/chat/completions')), { message: /more than one \/\. Drop the \/ at the end of the client's Base URL\. Also: \/v1 is in the path twice\. Drop \/v1/ });
    // An OpenAI client given `<origin>/v1/` that does not trim the / sends /v1//chat/completions.
    for (const [method, path] of [['POST', '/v1//chat/completions'], ['GET', '/v1//models'], ['GET', '/v1///models/x']] as const) {
      t.match(await errorOf(await send(method, path)), { code: 'ZN_ERR_NOT_FOUND', message: /: the path has \/\/ after \/v1\. Drop the \/ at the end of the client's Base URL\. OpenAI clients take/ }, path);
    }
    t.equal((await errorOf(await send('GET', '/v1//nothing'))).message, 'No route for GET /v1//nothing.', 'not a route with one / either: the plain answer');
  });

  t.test('a path no route serves is answered 404 whatever its body: broken JSON, another content type or a charset the node does not read is no reason to hide the Base URL mistake', async (t) => {
    const post = (path: string, contentType: string, body: string): Promise<Response> =>
      fetch(node.origin + path, { method: 'POST', headers: { authorization: `Bearer ${node.secret}`, 'content-type': contentType }, body });
    for (const [contentType, body] of [
      ['application/json', '{"model": "echo", "messages": ['],
      ['application/json', ''],
      ['text/plain', 'hello'],
      ['application/x-www-form-urlencoded', 'a=b'],
      ['application/json; charset=latin1', '{}'],
    ] as const) {
      const res = await post('/chat/completions', contentType, body);
      t.equal(res.status, 404, `${contentType} ${JSON.stringify(body)}`);
      t.match(await errorOf(res), { code: 'ZN_ERR_NOT_FOUND', message: /^No route for POST \/chat\/completions: the node serves it as POST \/v1\/chat\/completions\. Add \/v1/ }, contentType);
    }
    const messages = await post('/v1/v1/messages', 'application/json', '{"model":');
    t.equal(messages.status, 404);
    t.match(await messages.json(), { type: 'error', error: { type: 'not_found_error', code: 'ZN_ERR_NOT_FOUND', message: DROP_V1 } }, "in Anthropic's shape");
    // A route that exists still refuses the same bodies with their own codes.
    t.equal((await errorOf(await post('/v1/chat/completions', 'application/json', '{"model": "echo", "messages": ['))).code, 'ZN_ERR_INVALID_JSON');
  });
});
