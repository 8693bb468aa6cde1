// The node asks every chat stream's upstream for usage (stream_options.include_usage) to meter it,
// and takes that usage out again for a caller that did not ask for it, whatever shape the upstream
// gives it: a usage chunk with `choices: []` (OpenAI), one with no `choices` at all (Fireworks,
// older LiteLLM: `chunk.choices[0]` would throw in the caller's code), or usage on the finish chunk.
// The record is metered from it in each case. A caller that asked for usage gets a usage chunk
// without choices with `choices: []`: the openai SDK's stream helpers iterate it on every chunk.
import t from 'tap';
import { sse, startScriptedUpstreamNode } from './scripted-upstream-node.js';

const USAGE = { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 };
const envelope = { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo' };
const content = { ...envelope, choices: [{ index: 0, delta: { content: 'Hello' }, finish_reason: null }] };
const finish = { ...envelope, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] };
const ask = { model: 'echo', stream: true, max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] };

/** The JSON chunks of an SSE body, [DONE] left out. */
function chunksOf(text: string): Array<Record<string, unknown>> {
  return text
    .split('\n')
    .filter((line) => line.startsWith('data: ') && line !== 'data: [DONE]')
    .map((line) => JSON.parse(line.slice('data: '.length)) as Record<string, unknown>);
}

t.test('a caller that did not ask for stream usage gets none, whatever shape the upstream gave it, and the record is metered', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  const shapes: Array<[string, unknown[]]> = [
    ['a usage chunk with empty choices', [content, finish, { ...envelope, choices: [], usage: USAGE }]],
    ['a usage chunk without choices', [content, finish, { ...envelope, usage: USAGE }]],
    ['a usage chunk with null choices', [content, finish, { ...envelope, choices: null, usage: USAGE }]],
    // Vendor fields on OpenAI's shape make it no less the usage chunk (Groq, Azure).
    ['a usage chunk with empty choices and x_groq', [content, finish, { ...envelope, choices: [], usage: USAGE, x_groq: { id: 'req_01' } }]],
    ['a usage chunk with empty choices and prompt_filter_results', [content, finish, { ...envelope, choices: [], usage: USAGE, prompt_filter_results: [] }]],
    ['usage on the finish chunk', [content, { ...finish, usage: USAGE }]],
  ];
  for (const [shape, chunks] of shapes) {
    node.answer(sse([...chunks.map((data) => ({ data })), { data: '[DONE]' }]));
    const { status, text, record } = await node.post('/v1/chat/completions', ask);
    t.equal(status, 200, shape);
    const got = chunksOf(text);
    t.same(
      got.map((chunk): unknown => (Array.isArray(chunk.choices) ? (chunk.choices as unknown[])[0] : `choices: ${JSON.stringify(chunk.choices)}`)),
      [{ index: 0, delta: { content: 'Hello' }, finish_reason: null }, { index: 0, delta: {}, finish_reason: 'stop' }],
      `${shape}: the content and finish chunks, each with a choice`,
    );
    t.notOk(got.some((chunk) => 'usage' in chunk), `${shape}: no usage reaches the caller`);
    t.match(text, /data: \[DONE\]\n\n$/, shape);
    t.same(record.usage, { inputTokens: 7, outputTokens: 3, estimated: false }, `${shape}: metered from the upstream's usage`);
  }
});

t.test('a usage chunk without choices but with other payload is kept for the caller without its usage', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  node.answer(sse([{ data: content }, { data: finish }, { data: { ...envelope, citations: ['https://example.com/a'], usage: USAGE } }, { data: '[DONE]' }]));
  const { text, record } = await node.post('/v1/chat/completions', ask);
  t.same(chunksOf(text).at(-1), { ...envelope, model: 'echo', citations: ['https://example.com/a'], choices: [] }, 'with choices: [], which SDKs iterate on every chunk');
  t.same(record.usage, { inputTokens: 7, outputTokens: 3, estimated: false });
});

t.test('a caller that asked for stream usage gets it as the upstream sent it, a usage chunk without choices given choices: [] as OpenAI sends it', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  for (const [last, expected] of [
    [{ ...envelope, usage: USAGE }, { ...envelope, usage: USAGE, choices: [] }],
    [{ ...envelope, choices: null, usage: USAGE }, { ...envelope, usage: USAGE, choices: [] }],
    [{ ...finish, usage: USAGE }, { ...finish, usage: USAGE }],
  ] as const) {
    node.answer(sse([{ data: content }, { data: last }, { data: '[DONE]' }]));
    const { text } = await node.post('/v1/chat/completions', { ...ask, stream_options: { include_usage: true } });
    t.same(chunksOf(text).at(-1), { ...expected, model: 'echo' });
  }
});
