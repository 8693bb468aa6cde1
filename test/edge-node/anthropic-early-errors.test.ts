// Errors raised before the pipeline runs (body too large, not JSON, wrong content type, unknown
// path, compressed body) on Anthropic's surface come in Anthropic's shape with `request-id`, so the
// official @anthropic-ai/sdk fills errorCode and requestID; OpenAI's routes keep OpenAI's shape.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import type { Test } from 'tap';
import { gzipSync } from 'node:zlib';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';
import { anthropicSdkError as sdkError } from './anthropic-fixtures.js';

const REQUEST_ID = /^req_[0-9A-HJKMNP-TV-Z]{26}$/;
const MAX_BODY_BYTES = 2048;


t.test('errors raised before the pipeline', async (t) => {
  const upstream = await startFakeAnthropicUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    maxBodyBytes: MAX_BODY_BYTES,
    bundle: (base) => ({
      upstreams: [...base.upstreams, { id: 'up-claude', name: 'claude', kind: 'anthropic', baseUrl: upstream.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 30_000 }],
      routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 }],
    }),
  });
  const client = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
  const post = (path: string, body: string | Buffer, headers: Record<string, string> = {}): Promise<Response> =>
    fetch(`${node.origin}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': node.secret, ...headers }, body });

  /** The response is Anthropic's error shape with `code`, and carries the same request id in both headers. */
  async function isAnthropicError(t: Test, res: Response, status: number, type: string, code: string): Promise<void> {
    t.equal(res.status, status);
    t.match(res.headers.get('request-id'), REQUEST_ID, 'request-id is set');
    t.equal(res.headers.get('request-id'), res.headers.get('x-request-id'));
    t.match(await res.json(), { type: 'error', error: { type, code, details: { error_code: code } } });
  }

  t.test('a body over the limit sent through the Anthropic SDK raises an error carrying our code and the request id', async (t) => {
    const err = await sdkError(client.messages.create({ model: 'claude', max_tokens: 5, messages: [{ role: 'user', content: 'x'.repeat(MAX_BODY_BYTES * 2) }] }));
    t.equal(err.status, 413);
    t.equal(err.errorCode, 'ZN_ERR_BODY_TOO_LARGE');
    t.match(err.requestID, REQUEST_ID);
    t.match(err.error, { type: 'error', error: { type: 'request_too_large', code: 'ZN_ERR_BODY_TOO_LARGE' } });
  });

  t.test('an Anthropic SDK call to a path the node does not serve is a NotFoundError with our code and the request id', async (t) => {
    const err = await sdkError(client.messages.countTokens({ model: 'claude', messages: [{ role: 'user', content: 'count' }] }));
    t.type(err, Anthropic.NotFoundError);
    t.equal(err.errorCode, 'ZN_ERR_NOT_FOUND');
    t.match(err.requestID, REQUEST_ID);
  });

  t.test('malformed JSON, a non-JSON content type and a compressed body on /v1/messages come back in Anthropic shape', async (t) => {
    await isAnthropicError(t, await post('/v1/messages', '{bad'), 400, 'invalid_request_error', 'ZN_ERR_INVALID_JSON');
    await isAnthropicError(t, await post('/v1/messages', 'hello', { 'content-type': 'text/plain' }), 400, 'invalid_request_error', 'ZN_ERR_INVALID_REQUEST');
    const body = JSON.stringify({ model: 'claude', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
    await isAnthropicError(t, await post('/v1/messages?beta=true', gzipSync(body), { 'content-encoding': 'gzip' }), 415, 'invalid_request_error', 'ZN_ERR_UNSUPPORTED_ENCODING');
  });

  t.test("OpenAI's routes keep OpenAI's shape and no request-id header for the same errors", async (t) => {
    for (const res of [await post('/v1/chat/completions', '{bad'), await post('/v1/chat/completions', 'x'.repeat(MAX_BODY_BYTES + 1)), await post('/v1/messagesx', '{}')]) {
      t.equal(res.headers.get('request-id'), null);
      t.match(res.headers.get('x-request-id'), REQUEST_ID);
      const body = (await res.json()) as Record<string, unknown>;
      t.notOk('type' in body, 'no Anthropic envelope');
      t.match(body, { error: { message: String, type: 'invalid_request_error', code: /^ZN_ERR_/ } });
    }
  });

  t.test('a valid call still works through the Anthropic SDK, with request-id on the answer', async (t) => {
    const { data, response } = await client.messages.create({ model: 'claude', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }).withResponse();
    t.equal(data.model, 'claude');
    t.equal(response.headers.get('request-id'), response.headers.get('x-request-id'));
  });
});
