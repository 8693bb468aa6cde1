// A count the upstream's usage block does not validly give (a string, negative, fractional, beyond
// 2^53, null, missing) is estimated as when no usage came at all — input from the prompt, output
// from the text delivered — and the record says `estimated`; it is never recorded as an exact 0
// (or message_start's placeholder 1), which left the tokens delivered unbilled. A valid count stays
// exact (docs/billing.md, "Stage settle").
import t from 'tap';
import type { Test } from 'tap';
import { PRICE, json, sse, startScriptedUpstreamNode } from './scripted-upstream-node.js';
import type { Answer, ScriptedUpstreamNode } from './scripted-upstream-node.js';

const TEXT = 'x'.repeat(400); // ≈100 tokens of answer text delivered
const PROMPT = 'y'.repeat(4000); // ≈1000 tokens of prompt
const DELIVERED_TOKENS = 100;
const INVALID_COUNTS: ReadonlyArray<[string, unknown]> = [
  ['a string', '100'],
  ['negative', -5],
  ['fractional', 99.5],
  ['beyond 2^53', 2 ** 60],
  ['null', null],
  ['missing', undefined],
];

const chatBody = { model: 'echo', max_tokens: 200, messages: [{ role: 'user', content: PROMPT }] };
const claudeBody = { model: 'claude', max_tokens: 200, messages: [{ role: 'user', content: PROMPT }] };

function chatAnswer(usage: Record<string, unknown> | undefined): Answer {
  return json({
    id: 'c1', object: 'chat.completion', created: 1, model: 'demo-echo',
    choices: [{ index: 0, message: { role: 'assistant', content: TEXT }, finish_reason: 'stop' }],
    ...(usage === undefined ? {} : { usage }),
  });
}

function claudeAnswer(usage: Record<string, unknown> | undefined): Answer {
  return json({
    id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [{ type: 'text', text: TEXT }],
    stop_reason: 'end_turn', stop_sequence: null, ...(usage === undefined ? {} : { usage }),
  });
}

/** An Anthropic stream of TEXT; `startUsage` undefined leaves message_start without usage. */
function claudeStream(startUsage: Record<string, unknown> | undefined, deltaUsage: Record<string, unknown>): Answer {
  const events: Array<Record<string, unknown>> = [
    { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [], stop_reason: null, stop_sequence: null, ...(startUsage === undefined ? {} : { usage: startUsage }) } },
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: TEXT } },
    { type: 'content_block_stop', index: 0 },
    { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: deltaUsage },
    { type: 'message_stop' },
  ];
  return sse(events.map((data) => ({ event: String(data.type), data })));
}

/** `{ key: value }`, or `{}` when the value is missing. */
function count(key: string, value: unknown): Record<string, unknown> {
  return value === undefined ? {} : { [key]: value };
}

/** The record's usage and cost for one answer, the caller served. */
async function metered(t: Test, node: ScriptedUpstreamNode, path: string, body: unknown, answer: Answer): Promise<{ usage: unknown; costMicros: number }> {
  node.answer(answer);
  const { status, record } = await node.post(path, body);
  t.equal(status, 200, 'the caller is served');
  return { usage: record.usage, costMicros: record.cost.costMicros };
}

const costOf = (input: number, output: number): number => input * PRICE.inputMicrosPerToken + output * PRICE.outputMicrosPerToken;

t.test('an invalid count in the upstream usage is estimated per count, never billed as 0', async (t) => {
  const node = await startScriptedUpstreamNode(t);

  // What the node estimates when no usage came at all: the reference for every invalid count.
  const unreported = await metered(t, node, '/v1/chat/completions', chatBody, chatAnswer(undefined));
  const { inputTokens: chatInputEstimate, outputTokens: outputEstimate } = unreported.usage as { inputTokens: number; outputTokens: number };
  t.equal(outputEstimate, DELIVERED_TOKENS, 'the delivered text is ≈100 tokens');
  t.ok(chatInputEstimate >= 1000, 'the prompt is ≈1000 tokens');
  const claudeInputEstimate = ((await metered(t, node, '/v1/messages', claudeBody, claudeAnswer(undefined))).usage as { inputTokens: number }).inputTokens;

  await t.test('valid counts stay exact on every path', async (t) => {
    const exact = { inputTokens: 1000, outputTokens: 100, estimated: false };
    t.same((await metered(t, node, '/v1/chat/completions', chatBody, chatAnswer({ prompt_tokens: 1000, completion_tokens: 100, total_tokens: 1100 }))).usage, exact);
    t.same((await metered(t, node, '/v1/messages', claudeBody, claudeAnswer({ input_tokens: 1000, output_tokens: 100 }))).usage, exact);
    t.same((await metered(t, node, '/v1/messages', { ...claudeBody, stream: true }, claudeStream({ input_tokens: 1000, output_tokens: 1 }, { output_tokens: 100 }))).usage, exact);
    t.same((await metered(t, node, '/v1/messages', claudeBody, claudeAnswer({ input_tokens: 1000, output_tokens: 0 }))).usage, { inputTokens: 1000, outputTokens: 0, estimated: false }, 'a valid 0 is a count');
  });

  for (const [what, bad] of INVALID_COUNTS) {
    await t.test(`an OpenAI answer's completion_tokens ${what} is estimated from the delivered text`, async (t) => {
      const got = await metered(t, node, '/v1/chat/completions', chatBody, chatAnswer({ prompt_tokens: 1000, ...count('completion_tokens', bad), total_tokens: 1100 }));
      t.same(got.usage, { inputTokens: 1000, outputTokens: outputEstimate, estimated: true });
      t.equal(got.costMicros, costOf(1000, outputEstimate));
    });
    await t.test(`an OpenAI answer's prompt_tokens ${what} is estimated from the prompt, its valid output kept`, async (t) => {
      const got = await metered(t, node, '/v1/chat/completions', chatBody, chatAnswer({ ...count('prompt_tokens', bad), completion_tokens: 250 }));
      t.same(got.usage, { inputTokens: chatInputEstimate, outputTokens: 250, estimated: true });
    });
    await t.test(`an Anthropic answer's output_tokens ${what} is estimated from the delivered text`, async (t) => {
      const got = await metered(t, node, '/v1/messages', claudeBody, claudeAnswer({ input_tokens: 1000, ...count('output_tokens', bad) }));
      t.same(got.usage, { inputTokens: 1000, outputTokens: outputEstimate, estimated: true });
      t.equal(got.costMicros, costOf(1000, outputEstimate));
    });
    await t.test(`an Anthropic answer's input_tokens ${what} is estimated from the prompt, its valid output kept`, async (t) => {
      const got = await metered(t, node, '/v1/messages', claudeBody, claudeAnswer({ ...count('input_tokens', bad), output_tokens: 250 }));
      t.same(got.usage, { inputTokens: claudeInputEstimate, outputTokens: 250, estimated: true }, 'its valid output count is kept');
    });
    await t.test(`an Anthropic stream's message_delta output_tokens ${what} is estimated, not message_start's placeholder`, async (t) => {
      const got = await metered(t, node, '/v1/messages', { ...claudeBody, stream: true }, claudeStream({ input_tokens: 1000, output_tokens: 1 }, count('output_tokens', bad)));
      t.same(got.usage, { inputTokens: 1000, outputTokens: outputEstimate, estimated: true });
      t.equal(got.costMicros, costOf(1000, outputEstimate));
    });
    await t.test(`an Anthropic stream's message_start input_tokens ${what} is estimated from the prompt`, async (t) => {
      const got = await metered(t, node, '/v1/messages', { ...claudeBody, stream: true }, claudeStream({ ...count('input_tokens', bad), output_tokens: 1 }, { output_tokens: 100 }));
      t.same(got.usage, { inputTokens: claudeInputEstimate, outputTokens: 100, estimated: true });
      t.equal(got.costMicros, costOf(claudeInputEstimate, 100));
    });
  }

  for (const [what, bad] of INVALID_COUNTS.slice(0, 4)) {
    for (const counter of ['cache_creation_input_tokens', 'cache_read_input_tokens']) {
      await t.test(`an Anthropic answer's ${counter} ${what} estimates the input, not read as 0`, async (t) => {
        const got = await metered(t, node, '/v1/messages', claudeBody, claudeAnswer({ input_tokens: 10, [counter]: bad, output_tokens: 250 }));
        t.same(got.usage, { inputTokens: claudeInputEstimate, outputTokens: 250, estimated: true });
      });
      await t.test(`an Anthropic stream's message_start ${counter} ${what} estimates the input`, async (t) => {
        const got = await metered(t, node, '/v1/messages', { ...claudeBody, stream: true }, claudeStream({ input_tokens: 10, [counter]: bad, output_tokens: 1 }, { output_tokens: 100 }));
        t.same(got.usage, { inputTokens: claudeInputEstimate, outputTokens: 100, estimated: true });
      });
    }
  }

  await t.test('an invalid cache counter in message_delta keeps message_start\'s valid one; a valid repeat clears an invalid one', async (t) => {
    const kept = await metered(t, node, '/v1/messages', { ...claudeBody, stream: true }, claudeStream({ input_tokens: 10, cache_read_input_tokens: 900, output_tokens: 1 }, { cache_read_input_tokens: '900', output_tokens: 100 }));
    t.same(kept.usage, { inputTokens: 910, outputTokens: 100, estimated: false });
    const cleared = await metered(t, node, '/v1/messages', { ...claudeBody, stream: true }, claudeStream({ input_tokens: 10, cache_read_input_tokens: -1, output_tokens: 1 }, { cache_read_input_tokens: 900, output_tokens: 100 }));
    t.same(cleared.usage, { inputTokens: 910, outputTokens: 100, estimated: false });
    const absent = await metered(t, node, '/v1/messages', claudeBody, claudeAnswer({ input_tokens: 10, cache_creation_input_tokens: null, output_tokens: 100 }));
    t.same(absent.usage, { inputTokens: 10, outputTokens: 100, estimated: false }, 'null or absent counters mean no cache use: exact');
  });

  await t.test('an Anthropic stream whose message_start carries no usage has its input estimated', async (t) => {
    const got = await metered(t, node, '/v1/messages', { ...claudeBody, stream: true }, claudeStream(undefined, { output_tokens: 100 }));
    t.same(got.usage, { inputTokens: claudeInputEstimate, outputTokens: 100, estimated: true });
  });
});
