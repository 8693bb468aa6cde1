/**
 * A streamed chat request asking for several choices (`n`) from an upstream that sends fewer (it
 * ignores `n`): a usage block on the first chunk is a running count (completion 0), so the answer
 * delivered after it is charged as estimated output, not as 0; a block after the latest finish is
 * final as before.
 */
import t from 'tap';
import { sse, startScriptedUpstreamNode } from './scripted-upstream-node.js';

const TEXT = 'x'.repeat(4000);
const chunk = (fields: Record<string, unknown>): { data: Record<string, unknown> } => ({ data: { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', ...fields } });
const runningCountFirst = sse([
  chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: '' } }], usage: { prompt_tokens: 10, completion_tokens: 0, total_tokens: 10 } }),
  chunk({ choices: [{ index: 0, delta: { content: TEXT } }] }),
  chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
  { data: '[DONE]' },
]);
const finalAfterFinish = sse([
  chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: TEXT } }] }),
  chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
  chunk({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 7, total_tokens: 17 } }),
  { data: '[DONE]' },
]);

t.test('a running count on the first chunk of a stream that sent fewer choices than asked is not taken as the final usage', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  const charged: Record<number, { output: number; estimated: boolean }> = {};
  for (const n of [1, 2]) {
    node.answer(runningCountFirst);
    const r = await node.post('/v1/chat/completions', { model: 'echo', max_tokens: 2000, n, stream: true, messages: [{ role: 'user', content: 'hello' }] });
    t.equal(r.status, 200);
    t.equal(r.record.status, 'ok');
    const usage = r.record.usage as { outputTokens: number; estimated: boolean };
    charged[n] = { output: usage.outputTokens, estimated: usage.estimated };
  }
  t.ok(charged[2]!.output > 0, `n=2: the delivered answer is charged as output (got ${charged[2]!.output})`);
  t.same(charged[2], charged[1], 'n=2 charged as n=1 for the same delivered answer');
});

t.test('a usage block after the latest finish of a stream that sent fewer choices than asked is final', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  node.answer(finalAfterFinish);
  const r = await node.post('/v1/chat/completions', { model: 'echo', max_tokens: 2000, n: 2, stream: true, messages: [{ role: 'user', content: 'hello' }] });
  t.equal(r.status, 200);
  t.match(r.record.usage, { inputTokens: 10, outputTokens: 7, estimated: false });
});
