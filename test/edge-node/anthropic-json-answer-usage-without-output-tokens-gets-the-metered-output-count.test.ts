// A compatible upstream whose JSON /v1/messages answer carries `usage` without a valid
// `output_tokens` (`{}`, the input count only, a string or a fraction) had it relayed as it came:
// the record metered the output from the text delivered, but the caller's SDK read
// `message.usage.output_tokens` as undefined or invalid. The node now fills in the output count the
// record has and keeps the upstream's other fields as sent (an integer past 2^53 as written); a valid
// output_tokens is never changed.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import { startRawUpstream } from '../fixtures/raw-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import type { PipelineNode } from './pipeline/pipeline-harness.js';
import { startPipelineNode, withClaudeRoute } from './pipeline/pipeline-harness.js';

const TEXT = 'lorem ipsum dolor sit amet consectetur adipiscing elit '.repeat(5);
/** An integer past 2^53 in a field beside the counts: it must go out as the upstream wrote it. */
const LONG = '9007199254740993';

/** The upstream's JSON message, its `usage` as given (written as is, so LONG stays exact). */
const answer = (usage: string): string =>
  `{"id":"msg_1","type":"message","role":"assistant","model":"claude-real","content":[{"type":"text","text":${JSON.stringify(TEXT)}}],"stop_reason":"end_turn","stop_sequence":null,"usage":${usage}}`;

async function nodeAnswering(t: { teardown(fn: () => unknown): void }, usage: string): Promise<PipelineNode> {
  const upstream = await startRawUpstream(t, (socket) => {
    const body = answer(usage);
    socket.end(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  });
  return startPipelineNode(t, { upstreamUrl: upstream.url, bundle: (base) => withClaudeRoute(base, upstream.url) });
}

const request = { model: 'claude', max_tokens: 4000, messages: [{ role: 'user' as const, content: 'hi' }] };

/** The usage the node metered the request at `index` with (the record's). */
const metered = (node: PipelineNode, index: number): Promise<{ inputTokens: number; outputTokens: number; estimated: boolean }> =>
  waitFor(() => node.finished[index]?.usage, { what: `request ${index} finished` });

async function post(node: PipelineNode): Promise<{ status: number; text: string }> {
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(request),
    signal: AbortSignal.timeout(15_000),
  });
  return { status: res.status, text: await res.text() };
}

const cases: Array<[string, string]> = [
  ['usage: {}', '{}'],
  ['usage: {"input_tokens": 5}', '{"input_tokens":5}'],
  ['an output_tokens given as a string', '{"input_tokens":5,"output_tokens":"7"}'],
  ['a fractional output_tokens', `{"input_tokens":5,"output_tokens":7.5,"cache_read_input_tokens":0,"x_long":${LONG}}`],
];

for (const [name, usage] of cases) {
  t.test(`a JSON answer with ${name} reaches the caller with the output count the record meters, the other fields kept`, async (t) => {
    const node = await nodeAnswering(t, usage);
    const res = await post(node);
    t.equal(res.status, 200);
    const sent = (JSON.parse(res.text) as { usage: Record<string, unknown> }).usage;
    const record = await metered(node, 0);
    t.equal(record.estimated, true, 'the record estimated the output');
    t.ok(record.outputTokens > 1, 'from the text delivered');
    t.ok(Number.isInteger(sent.output_tokens), `output_tokens is an integer (${String(sent.output_tokens)})`);
    t.equal(sent.output_tokens, record.outputTokens, "the record's output count");
    const { output_tokens: _given, ...others } = JSON.parse(usage) as Record<string, unknown>;
    const { output_tokens: _filled, ...kept } = sent;
    if (others.input_tokens === undefined) {
      t.equal(kept.input_tokens, record.inputTokens, 'an input_tokens left out gets the input count the record meters');
      delete kept.input_tokens;
    }
    t.same(kept, others, 'the fields the upstream sent beside it go on as they came');
    if (usage.includes(LONG)) t.ok(res.text.includes(`"x_long":${LONG}`), 'an integer past 2^53 goes out as written');
    if (others.input_tokens !== undefined) t.equal(record.inputTokens, others.input_tokens, 'the record keeps the upstream input count');
  });
}

t.test('a JSON answer with a valid output_tokens goes on with it unchanged', async (t) => {
  const node = await nodeAnswering(t, '{"input_tokens":5,"output_tokens":9}');
  const res = await post(node);
  t.equal(res.status, 200);
  t.same((JSON.parse(res.text) as { usage: unknown }).usage, { input_tokens: 5, output_tokens: 9 });
  const record = await metered(node, 0);
  t.equal(record.outputTokens, 9, "the record has the upstream's count");
});

t.test("the SDK's messages.create() gets the output count the record meters when the answer's usage has none", async (t) => {
  for (const usage of ['{}', '{"input_tokens":5}', '{"input_tokens":5,"output_tokens":"7"}', '{"input_tokens":5,"output_tokens":7.5}']) {
    const node = await nodeAnswering(t, usage);
    const message = await new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 15_000 }).messages.create(request);
    const record = await metered(node, 0);
    t.equal(message.usage.output_tokens, record.outputTokens, `output as metered (${usage})`);
    t.equal(message.usage.input_tokens, record.inputTokens, `input as metered (${usage})`);
  }
});
