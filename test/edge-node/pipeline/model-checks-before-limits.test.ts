// A request for a model the key may not use, a model the node does not serve, or a model of the
// other API family can never succeed: it is refused with its own code before the rate-limit stage,
// so it spends none of the key's or the account's quota, takes no concurrency slot, and is never
// turned into a retryable 429. Real app, real limiter (memory store), fake upstream.
import t from 'tap';
import { createLogger } from '../../../edge-node/src/logger.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { ACCOUNT_ID, bundleKey, newCallerKey } from '../config-fixtures.js';
import { sdkError, startPipelineNode } from './pipeline-harness.js';

const ask = (model: string) => ({ model, messages: [{ role: 'user' as const, content: 'may I?' }], max_tokens: 8 });

t.test('refusals of the model checks', async (t) => {
  const upstream = await startFakeUpstream(t);
  const restricted = newCallerKey();
  const single = newCallerKey();
  const limiter = new NodeRateLimiter(new MemoryLimitStore(), createLogger({ level: 'silent' }));
  t.teardown(() => limiter.close());
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    services: { limiter },
    bundle: (base) => ({
      // The account may make 3 requests a minute in all, whichever key makes them.
      accounts: [
        ...base.accounts.map((a) => (a.id === ACCOUNT_ID ? { ...a, limits: { requestsPerMinute: 3 } } : a)),
        { id: 'acct-solo', name: 'solo', status: 'active', limits: {} },
      ],
      apiKeys: [
        ...base.apiKeys,
        bundleKey('key-restricted', restricted.sha256, { allowedModels: ['echo'], limits: { requestsPerMinute: 2, tokensPerMinute: 100 } }),
        bundleKey('key-single', single.sha256, { accountId: 'acct-solo', limits: { concurrentRequests: 1 } }),
      ],
      upstreams: [...base.upstreams, { id: 'up-2', name: 'claude-up', kind: 'anthropic', baseUrl: upstream.url, apiKey: 'sk-ant', timeoutMs: 30_000 }],
      routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude-up', model: 'claude-x', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 }],
    }),
  });

  t.test("a forbidden, unknown or wrong-API model never counts against the key's or the account's requests per minute", async (t) => {
    const client = node.client({ apiKey: restricted.secret });
    const refusals: Array<{ model: string; status: number; code: string }> = [
      { model: 'echo-2', status: 403, code: 'ZN_ERR_MODEL_NOT_ALLOWED' },
      { model: 'no-such-model', status: 403, code: 'ZN_ERR_MODEL_NOT_ALLOWED' },
      { model: 'claude', status: 403, code: 'ZN_ERR_MODEL_NOT_ALLOWED' },
    ];
    for (let round = 0; round < 2; round++) {
      for (const r of refusals) {
        const err = await sdkError(client.chat.completions.create(ask(r.model)));
        t.equal(err.status, r.status, `${r.model}, round ${round + 1}: ${err.status}`);
        t.equal(err.code, r.code);
        t.notOk(err.headers?.get('retry-after'), 'nothing to retry');
      }
    }
    // Six refusals above; the key's own limit of 2 and the account's 3 are still whole.
    const everyModel = node.client();
    const allUnknown = await Promise.all([0, 1, 2].map(() => sdkError(everyModel.chat.completions.create(ask('no-such-model')))));
    t.same(allUnknown.map((e) => e.code), ['ZN_ERR_MODEL_NOT_FOUND', 'ZN_ERR_MODEL_NOT_FOUND', 'ZN_ERR_MODEL_NOT_FOUND']);
    const wrongApi = await sdkError(everyModel.chat.completions.create(ask('claude')));
    t.equal(wrongApi.code, 'ZN_ERR_MODEL_WRONG_API');
    const { response } = await client.chat.completions.create(ask('echo')).withResponse();
    t.equal(response.status, 200, "the restricted key's allowed model is served");
    t.equal(response.headers.get('x-ratelimit-remaining-requests'), '1', 'the key has used one request of its 2');
    t.equal((await client.chat.completions.create(ask('echo')).withResponse()).response.status, 200);
    t.equal((await everyModel.chat.completions.create(ask('echo')).withResponse()).response.status, 200, 'another key of the account still has the third request');
    const over = await sdkError(everyModel.chat.completions.create(ask('echo')));
    t.equal(over.code, 'ZN_ERR_RATE_LIMITED', 'and the fourth allowed request is the one the account limit refuses');
    const refusedStages = node.finished.filter((f) => f.outcome.errorCode?.startsWith('ZN_ERR_MODEL_')).map((f) => f.stages);
    t.equal(refusedStages.length, 10);
    for (const stages of refusedStages) t.notOk(stages.includes('rate-limit'), `refused before rate-limit: ${stages.join(',')}`);
  });

  t.test('a node without the model surface says so before it looks at the model', async (t) => {
    const toolsOnly = await startPipelineNode(t, { upstreamUrl: upstream.url, bundle: (base) => ({ node: { ...base.node, surfaces: ['tools'] } }) });
    const err = await sdkError(toolsOnly.client().chat.completions.create(ask('no-such-model')));
    t.equal(err.code, 'ZN_ERR_SURFACE_DISABLED');
  });

  t.test('GET /v1/models/{id} of a model the key may not use is refused before the rate limits too', async (t) => {
    // The key's 2 requests of this minute were spent above: a counted request would get 429.
    const client = node.client({ apiKey: restricted.secret });
    for (let i = 0; i < 3; i++) t.equal((await sdkError(client.models.retrieve('echo-2'))).code, 'ZN_ERR_MODEL_NOT_ALLOWED');
    t.equal((await sdkError(client.models.retrieve('echo'))).code, 'ZN_ERR_RATE_LIMITED', 'an allowed model is counted, and refused');
  });

  t.test('an unknown model gets 404, not 429, while the key holds its only concurrency slot', async (t) => {
    upstream.setBehaviour({ hang: true });
    const client = node.client({ apiKey: single.secret });
    const before = upstream.requests.length;
    const gone = new AbortController();
    const inFlight = client.chat.completions.create(ask('echo'), { signal: gone.signal }).catch(() => undefined);
    await waitFor(() => upstream.requests.length > before, { what: 'the slot holder to reach the upstream' });
    t.equal((await sdkError(client.chat.completions.create(ask('echo')))).code, 'ZN_ERR_CONCURRENCY_LIMITED', 'the slot is held');
    t.equal((await sdkError(client.chat.completions.create(ask('no-such-model')))).code, 'ZN_ERR_MODEL_NOT_FOUND');
    upstream.setBehaviour({});
    gone.abort();
    await inFlight;
  });
});
