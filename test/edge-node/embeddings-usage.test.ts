// An embedding has no output, so an upstream's usage block counts the input in prompt_tokens, in
// total_tokens, or in both; some OpenAI-compatible servers give only total_tokens. Either is the
// upstream's own count, billed as such; only an answer with neither is charged the node's estimate.
import t from 'tap';
import { PRICE, json, startScriptedUpstreamNode } from './billing/scripted-upstream-node.js';

const answer = (usage: unknown) => json({ object: 'list', model: 'demo-echo', data: [{ object: 'embedding', index: 0, embedding: [0.1, 0.2] }], usage });

t.test("an embeddings answer is billed by the upstream's count, from prompt_tokens or else total_tokens", async (t) => {
  const node = await startScriptedUpstreamNode(t);
  const input = 'a sentence being indexed for retrieval';

  node.answer(answer({ prompt_tokens: 41, total_tokens: 41 }));
  let { status, record } = await node.post('/v1/embeddings', { model: 'echo', input });
  t.equal(status, 200);
  t.same(record.usage, { inputTokens: 41, outputTokens: 0, estimated: false }, 'prompt_tokens');

  node.answer(answer({ total_tokens: 37 }));
  ({ status, record } = await node.post('/v1/embeddings', { model: 'echo', input }));
  t.equal(status, 200);
  t.same(record.usage, { inputTokens: 37, outputTokens: 0, estimated: false }, 'total_tokens only: the same count');
  t.equal(record.cost.costMicros, 37 * PRICE.inputMicrosPerToken);

  node.answer(answer({ prompt_tokens: 'many', total_tokens: 29 }));
  ({ record } = await node.post('/v1/embeddings', { model: 'echo', input }));
  t.same(record.usage, { inputTokens: 29, outputTokens: 0, estimated: false }, 'an invalid prompt_tokens gives way to a valid total_tokens');

  node.answer(answer({ total_tokens: -3 }));
  ({ record } = await node.post('/v1/embeddings', { model: 'echo', input }));
  t.equal(record.usage.estimated, true, 'no valid count: the estimate');
  t.ok(record.usage.inputTokens > 0);
});
