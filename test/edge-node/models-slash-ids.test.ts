// GET /v1/models/{id} for aliases that contain `/` (the config allows `org/model`): served whether
// the slash comes as is or escaped, with the key's permissions still applied; an empty id is a
// clear ZN_ERR_MODEL_NOT_FOUND, not a model named "".
import t from 'tap';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { bundleKey, newCallerKey } from './config-fixtures.js';
import { sdkError, startPipelineNode } from './pipeline/pipeline-harness.js';

t.test('models whose alias contains a slash', async (t) => {
  const upstream = await startFakeUpstream(t);
  const narrow = newCallerKey();
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base) => ({
      apiKeys: [...base.apiKeys, bundleKey('key-narrow', narrow.sha256, { allowedModels: ['echo'] })],
      routes: [
        ...base.routes,
        { alias: 'org/model-x', targets: [{ upstream: 'demo', model: 'x', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 },
        { alias: 'a/b/c', targets: [{ upstream: 'demo', model: 'x', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 },
      ],
    }),
  });
  const get = (path: string, secret = node.secret): Promise<Response> => fetch(node.origin + path, { headers: { authorization: `Bearer ${secret}` } });

  t.test('GET /v1/models/{id} serves an alias with a slash, sent as is or escaped', async (t) => {
    for (const [path, id] of [
      ['/v1/models/org/model-x', 'org/model-x'],
      ['/v1/models/org%2Fmodel-x', 'org/model-x'],
      ['/v1/models/a/b/c', 'a/b/c'],
      ['/v1/models/echo?x=1', 'echo'],
    ] as const) {
      const res = await get(path);
      t.equal(res.status, 200, path);
      t.match(await res.json(), { id, object: 'model', owned_by: 'zenova' }, path);
    }
  });

  t.test('the openai client retrieves such a model', async (t) => {
    const model = await node.client().models.retrieve('org/model-x');
    t.equal(model.id, 'org/model-x');
  });

  t.test('an alias with a slash the key may not use, or that does not exist, gets its own code', async (t) => {
    const forbidden = await sdkError(node.client({ apiKey: narrow.secret }).models.retrieve('org/model-x'));
    t.equal(forbidden.status, 403);
    t.equal(forbidden.code, 'ZN_ERR_MODEL_NOT_ALLOWED');
    const missing = await get('/v1/models/org/nope');
    t.equal(missing.status, 404);
    t.equal(((await missing.json()) as { error: { code: string } }).error.code, 'ZN_ERR_MODEL_NOT_FOUND');
  });

  t.test('GET /v1/models/ with no id is ZN_ERR_MODEL_NOT_FOUND saying no id was given', async (t) => {
    const res = await get('/v1/models/');
    t.equal(res.status, 404);
    const body = (await res.json()) as { error: { code: string; message: string } };
    t.equal(body.error.code, 'ZN_ERR_MODEL_NOT_FOUND');
    t.match(body.error.message, /No model id/);
    t.notMatch(body.error.message, /""/);
  });

  t.test('GET /v1/models still lists the aliases, slashes included', async (t) => {
    const res = await get('/v1/models');
    t.equal(res.status, 200);
    const ids = ((await res.json()) as { data: Array<{ id: string }> }).data.map((m) => m.id);
    t.ok(ids.includes('org/model-x') && ids.includes('a/b/c') && ids.includes('echo'), ids.join(', '));
  });
});
