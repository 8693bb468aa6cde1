// Some OpenAI-compatible servers send the same reasoning under both `reasoning` and
// `reasoning_content` (vLLM while it renamed the field, mlx-vlm). Both are checked, but the text is
// estimated once: as output when the upstream gives no usage (a JSON answer, a stream per delta),
// and as input when an assistant message sent back echoes both. Different texts under the two
// names are both counted.
import t from 'tap';
import { json, sse, startScriptedUpstreamNode } from './scripted-upstream-node.js';
import type { Answer } from './scripted-upstream-node.js';

const PIECE = 'Let me think about this step carefully. ';
const OTHER = 'A different thought entirely, worded anew. ';
const base = { id: 'c1', created: 1, model: 'demo-echo' };
const ask = { model: 'echo', max_completion_tokens: 4000, messages: [{ role: 'user', content: 'What is 6 x 7?' }] };

type Fields = (piece: string) => Record<string, unknown>;
const contentOnly: Fields = (piece) => ({ reasoning_content: piece });
const bothSame: Fields = (piece) => ({ reasoning_content: piece, reasoning: piece });
const bothDifferent: Fields = (piece) => ({ reasoning_content: piece, reasoning: piece.replaceAll(PIECE, OTHER) });

/** A stream of 20 reasoning deltas, the answer, its finish and [DONE]: no usage at all. */
function streamWithoutUsage(fields: Fields): Answer {
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({ data: { ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] } });
  return sse([...Array.from({ length: 20 }, () => chunk(fields(PIECE))), chunk({ content: '42' }), chunk({}, 'stop'), { data: '[DONE]' }]);
}

/** A JSON answer whose message carries 20 pieces of reasoning, without usage. */
function jsonWithoutUsage(fields: Fields): Answer {
  return json({ ...base, object: 'chat.completion', choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: '42', ...fields(PIECE.repeat(20)) } }] });
}

t.test('reasoning sent under both reasoning and reasoning_content with the same text is estimated once as output', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  for (const [shape, answer] of [['stream', streamWithoutUsage], ['JSON answer', jsonWithoutUsage]] as const) {
    const output = async (fields: Fields): Promise<number> => {
      node.answer(answer(fields));
      const { status, record } = await node.post('/v1/chat/completions', { ...ask, stream: shape === 'stream' });
      t.equal(status, 200);
      t.equal(record.usage.estimated, true, `${shape}: no usage came, so it is estimated`);
      return record.usage.outputTokens;
    };
    const once = await output(contentOnly);
    t.ok(once > 100, `${shape}: the reasoning is counted (${once} tokens)`);
    t.equal(await output(bothSame), once, `${shape}: the same text under both names counts as much as under one`);
    t.ok((await output(bothDifferent)) > once * 1.5, `${shape}: different texts under the two names are both counted`);
  }
});

t.test('an assistant message sent back with the same reasoning under both names is estimated once as input', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  const input = async (fields: Fields): Promise<{ tokens: number; reserved: number }> => {
    // No usage in the answer: the input count is the prompt estimate.
    node.answer(json({ ...base, object: 'chat.completion', choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'ok' } }] }));
    const messages = [...ask.messages, { role: 'assistant', content: '42', ...fields(PIECE.repeat(20)) }, { role: 'user', content: 'Why?' }];
    const { record } = await node.post('/v1/chat/completions', { ...ask, messages });
    t.equal(record.usage.estimated, true);
    return { tokens: record.usage.inputTokens, reserved: record.cost.reservedMicros };
  };
  const once = await input(contentOnly);
  t.ok(once.tokens > 100, `the reasoning sent back is counted (${once.tokens} tokens)`);
  t.same(await input(bothSame), once, 'the same text under both names is estimated (and reserved) as under one');
  t.ok((await input(bothDifferent)).tokens > once.tokens * 1.5, 'different texts under the two names are both counted');
});
