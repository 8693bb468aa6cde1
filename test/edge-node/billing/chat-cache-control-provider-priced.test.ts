// Routers (OpenRouter, LiteLLM) take Anthropic prompt caching on /v1/chat/completions as
// `cache_control` on a message or content part and bill the cache writes at 1.25× or 2× the input
// price, and OpenRouter's `provider` preferences pick among providers priced differently: neither
// is what the node reserves and charges on this API, so a priced chat request carrying them is
// refused before anything is reserved or forwarded; an unpriced one bills nothing and passes
// (docs/billing.md).
import t from 'tap';
import { json, startScriptedUpstreamNode } from './scripted-upstream-node.js';

const answer = json({
  id: 'c1', object: 'chat.completion', created: 1, model: 'demo-echo',
  choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'hello' } }],
  usage: { prompt_tokens: 20, completion_tokens: 5, total_tokens: 25 },
});
const text = [{ role: 'user', content: 'Say hello.' }];
const REQUESTS: Array<[string, Record<string, unknown>, string]> = [
  ['cache_control on a content part', { messages: [{ role: 'system', content: [{ type: 'text', text: 'Long rules.', cache_control: { type: 'ephemeral' } }] }, ...text] }, 'messages[0].content[0].cache_control'],
  ['a one-hour cache_control', { messages: [...text, { role: 'user', content: [{ type: 'text', text: 'More.' }, { type: 'text', text: 'Rules.', cache_control: { type: 'ephemeral', ttl: '1h' } }] }] }, 'messages[1].content[1].cache_control'],
  ['cache_control on a message', { messages: [{ role: 'user', content: 'Say hello.', cache_control: { type: 'ephemeral' } }] }, 'messages[0].cache_control'],
  ['provider routing preferences', { messages: text, provider: { order: ['cheap-host'], allow_fallbacks: false, sort: 'throughput' } }, 'provider'],
];

t.test('a priced chat request with cache_control or provider preferences is refused before anything is reserved or forwarded', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  node.answer(answer);
  for (const [what, request, param] of REQUESTS) {
    const { status, text: body, record } = await node.post('/v1/chat/completions', { model: 'echo', ...request });
    t.equal(status, 400, `${what}: refused`);
    t.match(JSON.parse(body), { error: { code: 'ZN_ERR_INVALID_REQUEST', param, message: /(above|past) the price this node charges/ } }, `${what}: names ${param}`);
    t.equal(record.cost.reservedMicros, 0, `${what}: nothing reserved`);
  }
  t.equal(node.calls(), 0, 'nothing forwarded');
  const nulls = await node.post('/v1/chat/completions', { model: 'echo', provider: null, messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi.', cache_control: null }] }] });
  t.equal(nulls.status, 200, 'null cache_control and provider pass');
});

t.test('an unpriced chat request may carry cache_control and provider preferences: it bills nothing', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  node.answer(answer);
  for (const [what, request] of REQUESTS) {
    const { status, record } = await node.post('/v1/chat/completions', { model: 'echo-2', ...request });
    t.equal(status, 200, `${what}: forwarded`);
    t.equal(record.cost.priced, false, `${what}: unpriced`);
  }
  t.equal(node.calls(), REQUESTS.length);
});
