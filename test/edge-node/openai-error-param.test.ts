// OpenAI-shaped error bodies carry `param` as OpenAI's do (null when no one parameter is at fault,
// `model` for the model codes), from the pipeline, the app's error handler and stream error events;
// Anthropic-shaped ones do not.
import t from 'tap';
import { zenovaError } from '../../edge-node/src/errors.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';

t.test('error bodies and param', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const post = (path: string, body: string, headers: Record<string, string> = {}): Promise<Response> =>
    fetch(node.origin + path, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}`, ...headers }, body });
  const chat = (body: Record<string, unknown>): string => JSON.stringify({ messages: [{ role: 'user', content: 'x' }], ...body });

  t.test('an unknown model names param model; a schema refusal names its first field', async (t) => {
    const unknown = await post('/v1/chat/completions', chat({ model: 'nope' }));
    t.equal(unknown.status, 404);
    t.same(((await unknown.json()) as { error: unknown }).error, {
      message: 'The model "nope" does not exist on this node; GET /v1/models lists the models this key may use.',
      type: 'invalid_request_error',
      param: 'model',
      code: 'ZN_ERR_MODEL_NOT_FOUND',
    });
    const invalid = await post('/v1/chat/completions', chat({ model: 'echo', stream: 'yes' }));
    t.equal(invalid.status, 400);
    t.match(await invalid.json(), { error: { param: 'stream', code: 'ZN_ERR_INVALID_REQUEST' } });
    const nested = await post('/v1/chat/completions', JSON.stringify({ model: 'echo', messages: [7] }));
    t.match(await nested.json(), { error: { param: /^messages\[0\]/, code: 'ZN_ERR_INVALID_REQUEST' } });
    const notObject = await post('/v1/chat/completions', '[1]');
    t.match(await notObject.json(), { error: { param: null, code: 'ZN_ERR_INVALID_REQUEST' } }, 'no one field is at fault');
  });

  t.test('errors from the app error handler carry param null', async (t) => {
    const notJson = await post('/v1/chat/completions', '{');
    t.same(await notJson.json(), { error: { message: 'The request body is not valid JSON.', type: 'invalid_request_error', param: null, code: 'ZN_ERR_INVALID_JSON' } });
    const noRoute = await fetch(`${node.origin}/v1/nothing`);
    t.match(await noRoute.json(), { error: { param: null, code: 'ZN_ERR_NOT_FOUND' } });
  });

  t.test('the Anthropic shape has no param', async (t) => {
    const res = await post('/v1/messages', JSON.stringify({ model: 'nope', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }));
    const body = (await res.json()) as { type: string; error: Record<string, unknown> };
    t.equal(body.type, 'error');
    t.equal(body.error.code, 'ZN_ERR_MODEL_NOT_FOUND');
    t.notOk('param' in body.error);
  });

  t.test('an instance may name the parameter it is about', async (t) => {
    t.equal(zenovaError('ZN_ERR_INVALID_REQUEST', 'bad n', { param: 'n' }).toBody().error.param, 'n');
    t.equal(zenovaError('ZN_ERR_INVALID_REQUEST').toBody().error.param, null);
  });
});
