// GET /v1/models answers an Anthropic SDK (its `anthropic-version`) in Anthropic's shape, errors
// included: also the errors raised before the pipeline (an undecodable path, a Content-Encoding,
// the doubled /v1 of a Base URL ending in /v1), so its APIError carries our code. Without the
// header, and on other paths whatever the headers, errors keep OpenAI's shape.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import type { Test } from 'tap';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';
import { anthropicSdkError as sdkError } from './anthropic-fixtures.js';

const REQUEST_ID = /^req_[0-9A-HJKMNP-TV-Z]{26}$/;
const ANTHROPIC = { 'anthropic-version': '2023-06-01' };

t.test('errors raised before the pipeline on the models paths', async (t) => {
  const upstream = await startFakeAnthropicUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base) => ({
      upstreams: [...base.upstreams, { id: 'up-claude', name: 'claude', kind: 'anthropic', baseUrl: upstream.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 30_000 }],
      routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 }],
    }),
  });
  const get = (path: string, headers: Record<string, string> = {}): Promise<Response> =>
    fetch(`${node.origin}${path}`, { headers: { 'x-api-key': node.secret, ...headers } });

  async function isAnthropicError(t: Test, res: Response, status: number, code: string): Promise<void> {
    t.equal(res.status, status);
    t.match(res.headers.get('request-id'), REQUEST_ID, 'request-id is set');
    t.match(await res.json(), { type: 'error', error: { type: String, code, message: String } });
  }

  async function isOpenAiError(t: Test, res: Response, status: number, code: string): Promise<void> {
    t.equal(res.status, status);
    const body = (await res.json()) as Record<string, unknown>;
    t.notOk('type' in body, 'no Anthropic envelope');
    t.match(body, { error: { message: String, code } });
  }

  t.test('with anthropic-version, an undecodable path, a compressed request and a doubled /v1 answer in Anthropic shape', async (t) => {
    await isAnthropicError(t, await get('/v1/models/%E0', ANTHROPIC), 400, 'ZN_ERR_INVALID_REQUEST');
    await isAnthropicError(t, await get('/v1/models', { ...ANTHROPIC, 'content-encoding': 'gzip' }), 415, 'ZN_ERR_UNSUPPORTED_ENCODING');
    await isAnthropicError(t, await get('/v1/v1/models', ANTHROPIC), 404, 'ZN_ERR_NOT_FOUND');
    await isAnthropicError(t, await get('//v1/models', ANTHROPIC), 404, 'ZN_ERR_NOT_FOUND');
  });

  t.test('the Anthropic SDK given a Base URL ending in /v1 gets a NotFoundError carrying our code', async (t) => {
    const client = new Anthropic({ baseURL: `${node.origin}/v1`, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
    const err = await sdkError(client.models.list());
    t.type(err, Anthropic.NotFoundError);
    t.equal(err.errorCode, 'ZN_ERR_NOT_FOUND');
    t.match(err.message, /\/v1 is in the path twice/);
  });

  t.test('without anthropic-version the same requests keep OpenAI shape', async (t) => {
    await isOpenAiError(t, await get('/v1/models/%E0'), 400, 'ZN_ERR_INVALID_REQUEST');
    await isOpenAiError(t, await get('/v1/models', { 'content-encoding': 'gzip' }), 415, 'ZN_ERR_UNSUPPORTED_ENCODING');
    await isOpenAiError(t, await get('/v1/v1/models'), 404, 'ZN_ERR_NOT_FOUND');
  });

  t.test('anthropic-version on a path outside messages and models does not change the shape', async (t) => {
    await isOpenAiError(t, await get('/v1/embeddingsx', ANTHROPIC), 404, 'ZN_ERR_NOT_FOUND');
    await isOpenAiError(t, await get('/v1/chat/completions/%E0', ANTHROPIC), 400, 'ZN_ERR_INVALID_REQUEST');
  });
});
