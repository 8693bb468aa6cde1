// A compatible upstream whose final message_delta carries `usage` without a valid `output_tokens`
// (`{}`, the input count only, a string or a fraction) had it relayed as it came: the record metered
// the output from the text delivered, but Anthropic's SDKs read `usage.output_tokens` of every
// message_delta (MessageStream writes it into the final message), so the caller saw it undefined or
// invalid. The node now fills in the output count the record has and keeps the upstream's other fields.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import { SSE_HEAD_CHUNKED, httpChunk, startRawUpstream } from '../fixtures/raw-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import type { PipelineNode } from './pipeline/pipeline-harness.js';
import { startPipelineNode, withClaudeRoute } from './pipeline/pipeline-harness.js';

/** An Anthropic SSE event of `type`, its data `{type, ...fields}`. */
const event = (type: string, fields: Record<string, unknown> = {}): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`;
const START_INPUT = 10;
const messageStart = event('message_start', {
  message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: START_INPUT, output_tokens: 1 } },
});
const TEXT = 'lorem ipsum dolor sit amet consectetur adipiscing elit '.repeat(5);

/** The upstream's answer: some text, then a final message_delta with `usage`, then message_stop. */
const answer = (usage: Record<string, unknown>): string =>
  [
    messageStart,
    event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
    event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: TEXT } }),
    event('content_block_stop', { index: 0 }),
    event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage }),
    event('message_stop'),
  ].join('');

async function nodeAnswering(t: { teardown(fn: () => unknown): void }, usage: Record<string, unknown>): Promise<PipelineNode> {
  const upstream = await startRawUpstream(t, (socket) => {
    socket.write(SSE_HEAD_CHUNKED);
    socket.end(httpChunk(answer(usage)) + '0\r\n\r\n');
  });
  return startPipelineNode(t, { upstreamUrl: upstream.url, bundle: (base) => withClaudeRoute(base, upstream.url) });
}

const request = { model: 'claude', max_tokens: 4000, messages: [{ role: 'user' as const, content: 'hi' }] };

/** The usage the node metered the request at `index` with (the record's). */
const metered = (node: PipelineNode, index: number): Promise<{ inputTokens: number; outputTokens: number; estimated: boolean }> =>
  waitFor(() => node.finished[index]?.usage, { what: `request ${index} finished` });

const cases: Array<[string, Record<string, unknown>]> = [
  ['usage: {}', {}],
  ['usage: {"input_tokens": 5}', { input_tokens: 5 }],
  ['an output_tokens given as a string', { input_tokens: 5, output_tokens: '7' }],
  ['a fractional output_tokens', { input_tokens: 5, output_tokens: 7.5, cache_read_input_tokens: 0 }],
];

for (const [name, usage] of cases) {
  t.test(`a final message_delta with ${name} reaches the caller with the output count the record meters, the other fields kept`, async (t) => {
    const node = await nodeAnswering(t, usage);
    const res = await fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ ...request, stream: true }),
      signal: AbortSignal.timeout(15_000),
    });
    t.equal(res.status, 200);
    const body = await res.text();
    const deltas = body
      .split('\n\n')
      .map((block) => /^data: (.*)$/m.exec(block)?.[1])
      .filter((data): data is string => data !== undefined)
      .map((data) => JSON.parse(data) as { type: string; usage?: Record<string, unknown> })
      .filter((data) => data.type === 'message_delta');
    t.equal(deltas.length, 1, 'one message_delta');
    const sent = deltas[0]?.usage ?? {};
    const record = await metered(node, 0);
    t.equal(record.estimated, true, 'the record estimated the output');
    t.ok(record.outputTokens > 1, 'from the text delivered');
    t.ok(Number.isInteger(sent.output_tokens), `output_tokens is an integer (${String(sent.output_tokens)})`);
    t.equal(sent.output_tokens, record.outputTokens, "the record's output count");
    const { output_tokens: _given, ...others } = usage;
    const { output_tokens: _filled, ...kept } = sent;
    t.same(kept, others, 'the fields the upstream sent beside it go on as they came');
    t.equal(record.inputTokens, usage.input_tokens ?? START_INPUT, 'the record keeps the upstream input count');
  });
}

t.test("the SDK's stream helper ends with the output count the record meters when the final delta's usage has none", async (t) => {
  for (const usage of [{}, { input_tokens: 5 }]) {
    const node = await nodeAnswering(t, usage);
    const final = await new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 15_000 }).messages.stream(request).finalMessage();
    const record = await metered(node, 0);
    t.equal(final.usage.output_tokens, record.outputTokens, `output as metered (${JSON.stringify(usage)})`);
    t.equal(final.usage.input_tokens, record.inputTokens, `input as metered (${JSON.stringify(usage)})`);
  }
});
