// Some OpenAI-compatible servers send a stream's usage chunk without `choices`. OpenAI always sends
// `choices: []` there, and the openai SDK iterates `chunk.choices` on every chunk: its stream
// helpers (finalChatCompletion, runTools) failed with "chunk.choices is not iterable" after the
// answer was delivered and billed. A caller that asks for usage now gets the chunk with `choices: []`.
import t from 'tap';
import { startGuardedNode } from './guardrails/guarded-node.js';

const envelope = { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'demo-echo' };
const data = (chunk: Record<string, unknown>): string => `data: ${JSON.stringify(chunk)}\n\n`;
const USAGE = { prompt_tokens: 2, completion_tokens: 1, total_tokens: 3 };
const messages = [{ role: 'user' as const, content: 'hi' }];

t.test("the openai SDK's stream helper reads a stream whose usage chunk came without choices, usage included", async (t) => {
  const { upstream, node } = await startGuardedNode(t, []);
  upstream.answer = {
    sse: [
      data({ ...envelope, choices: [{ index: 0, delta: { role: 'assistant', content: 'hi' }, finish_reason: null }] }),
      data({ ...envelope, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
      data({ ...envelope, usage: USAGE }),
      'data: [DONE]\n\n',
    ],
  };
  const stream = node.client().chat.completions.stream({ model: 'echo', messages, stream_options: { include_usage: true } });
  const final = await stream.finalChatCompletion();
  t.equal(final.choices[0]?.message.content, 'hi');
  t.same(final.usage, USAGE);
});
