// GET /v1/models and /v1/models/{id} with `anthropic-version` (as the Anthropic SDK sends them)
// answer in Anthropic's Models API shape with the aliases /v1/messages serves that the key may
// use, and fail in Anthropic's shape; without the header they stay OpenAI's. An unknown model
// says where the caller's own SDK finds the models it may use.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { anthropicSdkError } from './anthropic-fixtures.js';
import { bundleKey, newCallerKey } from './config-fixtures.js';
import { sdkError, startPipelineNode, withClaudeRoute } from './pipeline/pipeline-harness.js';

const RFC_3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

t.test('the models API to Anthropic callers', async (t) => {
  const upstream = await startFakeUpstream(t);
  const anthropic = await startFakeAnthropicUpstream(t);
  const echoOnly = newCallerKey();
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base) => {
      const claude = withClaudeRoute(base, anthropic.url);
      return { ...claude, apiKeys: [...base.apiKeys, bundleKey('key-echo-only', echoOnly.sha256, { allowedModels: ['echo'] })] };
    },
  });
  const client = (apiKey = node.secret): Anthropic => new Anthropic({ baseURL: node.origin, apiKey, maxRetries: 0, timeout: 20_000 });
  const anthropicGet = (path: string, apiKey = node.secret): Promise<Response> => fetch(node.origin + path, { headers: { 'x-api-key': apiKey, 'anthropic-version': '2023-06-01' } });

  t.test('the Anthropic SDK lists the Anthropic aliases its key may use, in the Models API shape', async (t) => {
    const page = await client().models.list();
    t.same(page.data.map((m) => m.id), ['claude'], 'only the aliases /v1/messages serves');
    const res = await anthropicGet('/v1/models');
    t.equal(res.status, 200);
    const body = (await res.json()) as { data: Array<Record<string, unknown>>; has_more: unknown; first_id: unknown; last_id: unknown };
    t.same(Object.keys(body).sort(), ['data', 'first_id', 'has_more', 'last_id']);
    t.match(body, { has_more: false, first_id: 'claude', last_id: 'claude' });
    t.match(body.data[0], { type: 'model', id: 'claude', display_name: 'claude', created_at: RFC_3339, capabilities: null, lifecycle: 'active' });
    const none = (await (await anthropicGet('/v1/models', echoOnly.secret)).json()) as Record<string, unknown>;
    t.same(none, { data: [], has_more: false, first_id: null, last_id: null }, 'a key that may use no Anthropic alias gets an empty page');
    // Without the header, the OpenAI list as before.
    const openAi = (await node.client().models.list()).data.map((m) => m.id);
    t.ok(openAi.includes('echo') && !openAi.includes('claude'), openAi.join(', '));
  });

  t.test('the Anthropic SDK retrieves an Anthropic alias, and other ids fail with our code in its shape', async (t) => {
    const model = await client().models.retrieve('claude');
    t.match(model, { type: 'model', id: 'claude', display_name: 'claude', created_at: RFC_3339 });
    const openAiAlias = await anthropicSdkError(client().models.retrieve('echo'));
    t.equal(openAiAlias.status, 400);
    t.equal(openAiAlias.errorCode, 'ZN_ERR_MODEL_WRONG_API');
    const unknown = await anthropicSdkError(client().models.retrieve('nope'));
    t.equal(unknown.status, 404);
    t.equal(unknown.errorCode, 'ZN_ERR_MODEL_NOT_FOUND');
    const forbidden = await anthropicSdkError(client(echoOnly.secret).models.retrieve('claude'));
    t.equal(forbidden.errorCode, 'ZN_ERR_MODEL_NOT_ALLOWED');
    // Without the header, as before: an Anthropic alias is the other API's.
    t.equal((await sdkError(node.client().models.retrieve('claude'))).code, 'ZN_ERR_MODEL_WRONG_API');
  });

  t.test("the SDK gets the request id from Anthropic's request-id header on models answers and their errors", async (t) => {
    // The SDK reads `request-id` (not x-request-id) into `_request_id` and APIError.requestID.
    const { response, request_id: listed } = await client().models.list().withResponse();
    t.match(listed, /^req_/);
    t.equal(listed, response.headers.get('x-request-id'));
    const unknown = await client().models.retrieve('nope').then(() => undefined, (err: unknown) => err);
    t.ok(unknown instanceof Anthropic.APIError);
    t.match((unknown as InstanceType<typeof Anthropic.APIError>).requestID, /^req_/);
    const wrongKey = await client('sk-wrong').models.list().then(() => undefined, (err: unknown) => err);
    t.equal((wrongKey as InstanceType<typeof Anthropic.APIError>).status, 401);
    t.match((wrongKey as InstanceType<typeof Anthropic.APIError>).requestID, /^req_/);
  });

  t.test('an unknown model tells each SDK\'s caller where its own model list is', async (t) => {
    const onMessages = await anthropicSdkError(client().messages.create({ model: 'nope', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }));
    t.equal(onMessages.errorCode, 'ZN_ERR_MODEL_NOT_FOUND');
    t.match((onMessages.error as { error: { message: string } }).error.message, /^The model "nope" does not exist on this node; GET \/v1\/models with an anthropic-version header \(the Anthropic SDK's models\.list\(\)\) lists the models this key may use on \/v1\/messages\./);
    const onChat = await sdkError(node.client().chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'hi' }] }));
    t.equal(onChat.code, 'ZN_ERR_MODEL_NOT_FOUND');
    t.match(onChat.message, /"nope" does not exist on this node; GET \/v1\/models lists the models this key may use\.$/);
  });
});
