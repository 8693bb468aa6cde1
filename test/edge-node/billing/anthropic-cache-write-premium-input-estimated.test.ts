// An Anthropic answer whose input total cannot be trusted (a cache-read or input counter not validly
// given) has its input estimated from the prompt, but the prompt-cache writes it validly gives
// (`cache_creation_input_tokens`, its per-lifetime breakdown) are still charged their premium
// (1.25× for 5 minutes, 2× for 1 hour), held to the estimated input: no premium on tokens the input
// does not count. Before, the writes went with the input and were dropped, premium and all
// (docs/billing.md, "Prompt-cache writes").
import t from 'tap';
import type { Test } from 'tap';
import { PRICE, json, sse, startScriptedUpstreamNode } from './scripted-upstream-node.js';
import type { Answer, ScriptedUpstreamNode } from './scripted-upstream-node.js';

const RATE = PRICE.inputMicrosPerToken;
const OUTPUT_TOKENS = 7;

function claudeBody(content: string, stream: boolean): Record<string, unknown> {
  return { model: 'claude', max_tokens: 10, messages: [{ role: 'user', content }], stream };
}

function claudeAnswer(usage: Record<string, unknown> | undefined): Answer {
  return json({ id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [{ type: 'text', text: 'ok' }], stop_reason: 'end_turn', stop_sequence: null, ...(usage === undefined ? {} : { usage }) });
}

/** A stream whose message_start carries `usage` and whose final message_delta repeats `input_tokens` and gives the output count. */
function claudeStream(usage: Record<string, unknown>): Answer {
  const events: Array<Record<string, unknown>> = [
    { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } } },
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'ok' } },
    { type: 'content_block_stop', index: 0 },
    { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { input_tokens: usage.input_tokens, output_tokens: OUTPUT_TOKENS } },
    { type: 'message_stop' },
  ];
  return sse(events.map((data) => ({ event: String(data.type), data })));
}

/** The input the node estimates for a prompt when the upstream gives no usage at all. */
async function inputEstimate(node: ScriptedUpstreamNode, content: string): Promise<number> {
  node.answer(claudeAnswer(undefined));
  return (await node.post('/v1/messages', claudeBody(content, false))).record.usage.inputTokens;
}

async function checkCharged(t: Test, node: ScriptedUpstreamNode, content: string, usage: Record<string, unknown>, premiumOf: (estimate: number) => number): Promise<void> {
  const estimate = await inputEstimate(node, content);
  for (const stream of [false, true]) {
    node.answer(stream ? claudeStream(usage) : claudeAnswer({ ...usage, output_tokens: OUTPUT_TOKENS }));
    const { status, record } = await node.post('/v1/messages', claudeBody(content, stream));
    const label = stream ? 'stream' : 'JSON';
    t.equal(status, 200, `${label}: served`);
    t.same(record.usage, { inputTokens: estimate, outputTokens: OUTPUT_TOKENS, estimated: true }, `${label}: the input is estimated from the prompt, the output kept`);
    t.equal(record.cost.costMicros, estimate * RATE + OUTPUT_TOKENS * PRICE.outputMicrosPerToken + premiumOf(estimate), `${label}: the cost adds the write premium`);
  }
}

t.test('prompt-cache writes validly given are charged their premium when the input is estimated', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  const longPrompt = 'y'.repeat(400); // ≈100 tokens

  await t.test('a cache-read counter given as a string: 3 five-minute writes at 1.25×, the quarter micro-units rounded up', async (t) => {
    await checkCharged(t, node, 'hello', { input_tokens: 10, cache_creation_input_tokens: 3, cache_read_input_tokens: '5' }, () => Math.ceil((3 * RATE) / 4));
  });

  await t.test('a negative cache-read counter: the per-lifetime breakdown charged, 10 five-minute and 30 one-hour writes', async (t) => {
    const usage = { input_tokens: 10, cache_creation_input_tokens: 40, cache_read_input_tokens: -1, cache_creation: { ephemeral_5m_input_tokens: 10, ephemeral_1h_input_tokens: 30 } };
    await checkCharged(t, node, longPrompt, usage, () => Math.ceil(((10 + 4 * 30) * RATE) / 4));
  });

  await t.test('writes past the estimated input are held to it, 1-hour writes first', async (t) => {
    const usage = { input_tokens: 10, cache_creation_input_tokens: 100_000, cache_read_input_tokens: 5.5, cache_creation: { ephemeral_5m_input_tokens: 50_000, ephemeral_1h_input_tokens: 50_000 } };
    await checkCharged(t, node, longPrompt, usage, (estimate) => estimate * RATE);
  });

  await t.test('an input_tokens given as a string, valid writes without a breakdown: charged at 1.25×', async (t) => {
    await checkCharged(t, node, longPrompt, { input_tokens: '10', cache_creation_input_tokens: 20 }, () => Math.ceil((20 * RATE) / 4));
  });
});
