// Anthropic bills prompt-cache writes above the input price: 1.25× for a 5-minute write, 2× for a
// 1-hour one (`ttl: "1h"`). The node charges that premium on top of the input tokens (which count
// the writes once already), from `usage.cache_creation`'s per-lifetime counts, or, when only
// `cache_creation_input_tokens` is given, at 2× if the request asked for a 1-hour lifetime anywhere
// and 1.25× otherwise; fractions of a micro-unit are rounded up. A request that asks for caching
// reserves its input at the premium too, and `inference_geo` pinned to a region (1.1× the whole
// request) is refused before anything is forwarded (docs/billing.md).
import t from 'tap';
import { PRICE, json, sse, startScriptedUpstreamNode } from './scripted-upstream-node.js';
import type { Answer } from './scripted-upstream-node.js';

const RATE = PRICE.inputMicrosPerToken;
const OUTPUT_MICROS = 5 * PRICE.outputMicrosPerToken;
const PROMPT = 'lorem ipsum dolor sit amet '.repeat(400);

function claudeBody(cacheControl?: Record<string, unknown>, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    model: 'claude', max_tokens: 200,
    system: [{ type: 'text', text: PROMPT, ...(cacheControl === undefined ? {} : { cache_control: cacheControl }) }],
    messages: [{ role: 'user', content: 'Summarise.' }],
    ...extra,
  };
}

function claudeAnswer(usage: Record<string, unknown>): Answer {
  return json({ id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [{ type: 'text', text: 'ok' }], stop_reason: 'end_turn', stop_sequence: null, usage });
}

/** A stream whose message_start carries `usage` and whose message_delta repeats only the output count. */
function claudeStream(usage: Record<string, unknown>): Answer {
  const events: Array<Record<string, unknown>> = [
    { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } } },
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'ok' } },
    { type: 'content_block_stop', index: 0 },
    { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { input_tokens: usage.input_tokens, output_tokens: 5 } },
    { type: 'message_stop' },
  ];
  return sse(events.map((data) => ({ event: String(data.type), data })));
}

t.test('prompt-cache writes are charged at their premium on JSON answers and streams', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  const cases: Array<[string, Record<string, unknown>, Record<string, unknown>, number]> = [
    [
      'per-lifetime counts: 100 five-minute writes at 1.25×, 40 one-hour writes at 2×',
      claudeBody({ type: 'ephemeral', ttl: '1h' }),
      { input_tokens: 10, cache_creation_input_tokens: 140, cache_read_input_tokens: 0, output_tokens: 5, cache_creation: { ephemeral_5m_input_tokens: 100, ephemeral_1h_input_tokens: 40 } },
      150 * RATE + (100 * RATE) / 4 + 40 * RATE + OUTPUT_MICROS,
    ],
    [
      'only the total, the request asking for no lifetime: 1.25×, the quarter micro-unit rounded up',
      claudeBody({ type: 'ephemeral' }),
      { input_tokens: 10, cache_creation_input_tokens: 1001, output_tokens: 5 },
      1011 * RATE + Math.ceil((1001 * RATE) / 4) + OUTPUT_MICROS,
    ],
    [
      'only the total, the request asking for 1 hour in a message block: 2×',
      claudeBody(undefined, { messages: [{ role: 'user', content: [{ type: 'text', text: 'Summarise.', cache_control: { type: 'ephemeral', ttl: '1h' } }] }] }),
      { input_tokens: 10, cache_creation_input_tokens: 1000, output_tokens: 5 },
      1010 * RATE + 1000 * RATE + OUTPUT_MICROS,
    ],
    ['cache reads only: no premium', claudeBody({ type: 'ephemeral' }), { input_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 1000, output_tokens: 5 }, 1010 * RATE + OUTPUT_MICROS],
  ];
  for (const [what, body, usage, costMicros] of cases) {
    for (const stream of [false, true]) {
      node.answer(stream ? claudeStream(usage) : claudeAnswer(usage));
      const { status, record } = await node.post('/v1/messages', { ...body, stream });
      const label = `${what} (${stream ? 'stream' : 'JSON'})`;
      t.equal(status, 200, `${label}: served`);
      const inputTokens = (usage.input_tokens as number) + ((usage.cache_creation_input_tokens as number | undefined) ?? 0) + ((usage.cache_read_input_tokens as number | undefined) ?? 0);
      t.same(record.usage, { inputTokens, outputTokens: 5, estimated: false }, `${label}: the record's input counts every written token once`);
      t.equal(record.cost.costMicros, costMicros, `${label}: the cost adds the write premium`);
    }
  }
});

t.test('a request asking for prompt caching reserves its input at the premium of the longest lifetime it asks for', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  node.answer(claudeAnswer({ input_tokens: 10, output_tokens: 5 }));
  const reserved = async (cacheControl?: Record<string, unknown>): Promise<number> => (await node.post('/v1/messages', claudeBody(cacheControl))).record.cost.reservedMicros;
  const plain = await reserved();
  const inputMicros = plain - 200 * PRICE.outputMicrosPerToken;
  t.ok(inputMicros > 1000 * RATE, 'the prompt is estimated at over 1000 tokens');
  t.equal(await reserved({ type: 'ephemeral' }), plain + Math.ceil(inputMicros / 4), 'a 5-minute cache_control reserves the input at 1.25×');
  t.equal(await reserved({ type: 'ephemeral', ttl: '5m' }), plain + Math.ceil(inputMicros / 4), 'so does an explicit "5m"');
  t.equal(await reserved({ type: 'ephemeral', ttl: '1h' }), plain + inputMicros, 'a 1-hour cache_control reserves it at 2×');
});

t.test('inference_geo other than "global" is refused before anything is forwarded or reserved', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  node.answer(claudeAnswer({ input_tokens: 10, output_tokens: 5 }));
  const refused = await node.post('/v1/messages', claudeBody(undefined, { inference_geo: 'us' }));
  t.equal(refused.status, 400);
  t.match(JSON.parse(refused.text), { error: { message: /^Invalid request: inference_geo: only "global": .*billed above the price this node charges/ } });
  t.equal(refused.record.errorCode, 'ZN_ERR_INVALID_REQUEST');
  t.equal(refused.record.cost.reservedMicros, 0, 'nothing reserved');
  t.equal(node.calls(), 0, 'nothing forwarded');
  for (const geo of ['global', null]) {
    t.equal((await node.post('/v1/messages', claudeBody(undefined, { inference_geo: geo }))).status, 200, `inference_geo ${JSON.stringify(geo)} passes`);
  }
});
