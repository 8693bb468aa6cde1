// Every refusal the pipeline's own stages make, each with its code and status, none reaching the
// upstream, and each still going through the tail stages (meter, settle, spool) as 'rejected'.
import t from 'tap';
import { newCallerKey, bundleKey, ACCOUNT_ID } from '../config-fixtures.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { sdkError, startPipelineNode } from './pipeline-harness.js';

const TAIL = ['meter', 'settle', 'spool'];

t.test('refusals of the pipeline stages', async (t) => {
  const upstream = await startFakeUpstream(t);
  const revoked = newCallerKey();
  const expired = newCallerKey();
  const suspended = newCallerKey();
  const narrow = newCallerKey();
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    maxBodyBytes: 4096,
    bundle: (base) => ({
      accounts: [...base.accounts, { id: 'acct-frozen', name: 'frozen', status: 'suspended', limits: {} }],
      apiKeys: [
        ...base.apiKeys,
        bundleKey('key-revoked', revoked.sha256, { status: 'revoked' }),
        bundleKey('key-expired', expired.sha256, { expiresAt: '2020-01-01T00:00:00.000Z' }),
        bundleKey('key-suspended', suspended.sha256, { accountId: 'acct-frozen' }),
        bundleKey('key-narrow', narrow.sha256, { accountId: ACCOUNT_ID, allowedModels: ['echo-2'] }),
      ],
      upstreams: [...base.upstreams, { id: 'up-2', name: 'claude-up', kind: 'anthropic', baseUrl: upstream.url, apiKey: 'sk-ant', timeoutMs: 30_000 }],
      routes: [
        ...base.routes,
        { alias: 'claude', targets: [{ upstream: 'claude-up', model: 'claude-x', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 },
      ],
    }),
  });
  const chat = { model: 'echo', messages: [{ role: 'user' as const, content: 'hello' }] };

  const cases: Array<{ name: string; apiKey?: string; body?: Record<string, unknown>; status: number; code: string; message?: RegExp }> = [
    { name: 'an unknown key', apiKey: 'zn_sk_not-a-real-key', status: 401, code: 'ZN_ERR_API_KEY_INVALID' },
    { name: 'a revoked key', apiKey: revoked.secret, status: 401, code: 'ZN_ERR_API_KEY_REVOKED' },
    { name: 'an expired key', apiKey: expired.secret, status: 401, code: 'ZN_ERR_API_KEY_EXPIRED' },
    { name: "a key of a suspended account", apiKey: suspended.secret, status: 403, code: 'ZN_ERR_ACCOUNT_SUSPENDED' },
    { name: 'a model the key may not use', apiKey: narrow.secret, status: 403, code: 'ZN_ERR_MODEL_NOT_ALLOWED' },
    { name: 'an unknown model', body: { ...chat, model: 'no-such-model' }, status: 404, code: 'ZN_ERR_MODEL_NOT_FOUND' },
    { name: "an Anthropic alias through the OpenAI API", body: { ...chat, model: 'claude' }, status: 400, code: 'ZN_ERR_MODEL_WRONG_API', message: /\/v1\/messages/ },
    { name: 'a schema error', body: { model: 'echo', messages: [] }, status: 400, code: 'ZN_ERR_INVALID_REQUEST', message: /messages/ },
  ];
  for (const c of cases) {
    t.test(`${c.name} is refused with ${c.code}, never reaches the upstream and still runs the tail stages`, async (t) => {
      const before = upstream.requests.length;
      const client = node.client(c.apiKey !== undefined ? { apiKey: c.apiKey } : {});
      const err = await sdkError(client.chat.completions.create((c.body ?? chat) as never).withResponse());
      t.equal(err.status, c.status);
      t.equal(err.code, c.code);
      if (c.message) t.match(err.message, c.message);
      const requestId = err.headers?.get('x-request-id');
      t.ok(requestId, 'the refusal carries an x-request-id');
      t.equal(upstream.requests.length, before, 'nothing went upstream');
      const done = node.finished.find((f) => f.requestId === requestId);
      t.ok(done, 'the request finished through the pipeline');
      t.same(done?.outcome, { status: 'rejected', httpStatus: c.status, errorCode: c.code });
      for (const stage of TAIL) t.ok(done?.stages.includes(stage), `${stage} ran`);
      t.notOk(done?.stages.includes('forward'), 'the forward stage never ran');
    });
  }

  t.test('a request without a key is refused with ZN_ERR_API_KEY_MISSING', async (t) => {
    const res = await fetch(`${node.baseURL}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(chat) });
    t.equal(res.status, 401);
    t.match(await res.json(), { error: { code: 'ZN_ERR_API_KEY_MISSING', type: 'authentication_error' } });
  });

  t.test('a key sent as x-api-key is accepted like a bearer token', async (t) => {
    const res = await fetch(`${node.baseURL}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': node.secret }, body: JSON.stringify(chat) });
    t.equal(res.status, 200);
  });

  t.test('malformed JSON and an oversized body are refused by their codes before any stage', async (t) => {
    const finishedBefore = node.finished.length;
    const bad = await fetch(`${node.baseURL}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` }, body: '{"model":' });
    t.equal(bad.status, 400);
    t.match(await bad.json(), { error: { code: 'ZN_ERR_INVALID_JSON' } });
    t.ok(bad.headers.get('x-request-id'));
    const big = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
      body: JSON.stringify({ ...chat, messages: [{ role: 'user', content: 'x'.repeat(8192) }] }),
    });
    t.equal(big.status, 413);
    t.match(await big.json(), { error: { code: 'ZN_ERR_BODY_TOO_LARGE' } });
    t.equal(node.finished.length, finishedBefore, 'neither entered the pipeline');
  });

  t.test('a node that does not serve the model surface refuses it with ZN_ERR_SURFACE_DISABLED', async (t) => {
    const toolsOnly = await startPipelineNode(t, { upstreamUrl: upstream.url, bundle: (base) => ({ node: { ...base.node, surfaces: ['tools'] } }) });
    const before = upstream.requests.length;
    const err = await sdkError(toolsOnly.client().chat.completions.create(chat));
    t.equal(err.status, 403);
    t.equal(err.code, 'ZN_ERR_SURFACE_DISABLED');
    t.equal(upstream.requests.length, before);
    t.equal(toolsOnly.finished[0]?.outcome.status, 'rejected');
  });

  t.test('neither caller keys nor the upstream secret appear in the logs', async (t) => {
    const text = node.logText();
    for (const secret of [node.secret, revoked.secret, expired.secret, suspended.secret, 'sk-upstream-provider-secret-in-a-bundle-77']) t.notOk(text.includes(secret));
  });
});
