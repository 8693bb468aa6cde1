// An OpenAI-compatible upstream may count tokens it bills as output beside `completion_tokens`
// (xAI's reasoning tokens: total_tokens = prompt + completion + reasoning). A total above
// prompt + completion is read as output = total − prompt, on JSON answers and streams alike;
// OpenAI's own total (the sum) changes nothing (docs/billing.md, "Stage settle").
import t from 'tap';
import { PRICE, json, sse, startScriptedUpstreamNode } from './scripted-upstream-node.js';
import type { Answer } from './scripted-upstream-node.js';

const TEXT = 'The answer is 42.';
const body = { model: 'echo', max_completion_tokens: 4000, messages: [{ role: 'user', content: 'What is 6 x 7?' }] };

function answers(usage: Record<string, unknown>): { json: Answer; stream: Answer } {
  const base = { id: 'c1', created: 1, model: 'demo-echo' };
  return {
    json: json({ ...base, object: 'chat.completion', choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: TEXT } }], usage }),
    stream: sse([
      { data: { ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta: { role: 'assistant', content: TEXT }, finish_reason: null }] } },
      { data: { ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] } },
      { data: { ...base, object: 'chat.completion.chunk', choices: [], usage } },
      { data: '[DONE]' },
    ]),
  };
}

t.test('reasoning tokens a compatible upstream counts outside completion_tokens are charged as output', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  const grok = { prompt_tokens: 20, completion_tokens: 50, total_tokens: 3070, completion_tokens_details: { reasoning_tokens: 3000 } };
  const openai = { prompt_tokens: 20, completion_tokens: 3050, total_tokens: 3070, completion_tokens_details: { reasoning_tokens: 3000 } };
  for (const [what, usage] of [['reasoning beside completion_tokens (xAI)', grok], ['reasoning inside completion_tokens (OpenAI)', openai]] as const) {
    for (const stream of [false, true]) {
      const answer = answers(usage);
      node.answer(stream ? answer.stream : answer.json);
      const { status, record } = await node.post('/v1/chat/completions', { ...body, stream });
      t.equal(status, 200, `${what}, ${stream ? 'stream' : 'JSON'}: the caller is served`);
      t.same(record.usage, { inputTokens: 20, outputTokens: 3050, estimated: false }, `${what}, ${stream ? 'stream' : 'JSON'}: output is total − prompt`);
      t.equal(record.cost.costMicros, 20 * PRICE.inputMicrosPerToken + 3050 * PRICE.outputMicrosPerToken, `${what}, ${stream ? 'stream' : 'JSON'}: charged for the reasoning too`);
    }
  }
  // A total at or below the sum (or not a valid count) leaves the two counts as given.
  node.answer(answers({ prompt_tokens: 20, completion_tokens: 50, total_tokens: 60 }).json);
  t.same((await node.post('/v1/chat/completions', body)).record.usage, { inputTokens: 20, outputTokens: 50, estimated: false }, 'a total below the sum changes nothing');
  node.answer(answers({ prompt_tokens: 20, completion_tokens: 50, total_tokens: '3070' }).json);
  t.same((await node.post('/v1/chat/completions', body)).record.usage, { inputTokens: 20, outputTokens: 50, estimated: false }, 'an invalid total changes nothing');
});
