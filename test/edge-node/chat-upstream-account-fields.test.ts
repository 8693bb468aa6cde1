// The caller's chat body is forwarded as sent, so two of its fields would act for the operator's
// upstream account rather than the caller: a `service_tier` OpenAI bills above the standard price
// (the node charges only its own per-token price) and `store: true` (the conversation kept in the
// operator's OpenAI account). Both are refused, naming the field and why; the rest passes through.
import t from 'tap';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { startPipelineNode, sdkError, withClaudeRoute } from './pipeline/pipeline-harness.js';

t.test('chat fields that act for the upstream account', async (t) => {
  const upstream = await startFakeUpstream(t);
  const anthropic = await startFakeAnthropicUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base) => ({
      ...withClaudeRoute(base, anthropic.url),
      prices: [{ model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 10, requestMicros: 0 }],
    }),
  });
  const chat = (extra: Record<string, unknown>) => ({ model: 'echo', messages: [{ role: 'user' as const, content: 'hi' }], max_tokens: 5, ...extra });

  t.test('a service tier billed above the standard price is refused, naming the field and why', async (t) => {
    for (const tier of ['priority', 'scale', 'anything-else']) {
      const err = await sdkError(node.client().chat.completions.create(chat({ service_tier: tier }) as never));
      t.equal(err.status, 400, tier);
      t.equal(err.code, 'ZN_ERR_INVALID_REQUEST', tier);
      t.equal(err.param, 'service_tier', tier);
      t.match(err.message, /service_tier: must be one of "auto", "default", "flex": other tiers are billed above the price this node charges/, tier);
    }
    t.equal(upstream.requests.length, 0, 'nothing was forwarded');
  });

  t.test('store: true is refused, naming the field and why', async (t) => {
    const err = await sdkError(node.client().chat.completions.create(chat({ store: true }) as never));
    t.match(err, { status: 400, code: 'ZN_ERR_INVALID_REQUEST', param: 'store', message: /store: only false: true would keep the conversation in the operator's upstream account/ });
    t.equal(upstream.requests.length, 0, 'nothing was forwarded');
  });

  t.test('the standard tiers, store: false and their absence pass through as sent', async (t) => {
    for (const extra of [{ service_tier: 'auto' }, { service_tier: 'default' }, { service_tier: 'flex' }, { service_tier: null }, { store: false }, { store: null }, {}]) {
      await node.client().chat.completions.create(chat(extra) as never);
      t.match(upstream.requests.at(-1)?.body, extra, JSON.stringify(extra));
    }
  });

  t.test("Anthropic's own fields are not touched", async (t) => {
    const res = await fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'claude', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], service_tier: 'standard_only' }),
    });
    t.equal(res.status, 200);
    t.match(anthropic.requests.at(-1)?.body, { service_tier: 'standard_only' });
  });
});
