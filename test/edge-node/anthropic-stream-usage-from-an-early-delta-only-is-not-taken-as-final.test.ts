// An upstream that gave its output count only in an early message_delta (a running count) and sent
// the final one (with the stop_reason) without usage was recorded at that running count as exact
// (estimated: false), though most of the answer came after it, while the caller's filled final
// delta said the node's estimate. A count is final only when the final delta (or one after it)
// gives it: otherwise the record is the larger of the running count and the estimate, estimated,
// and the caller's final usage is the record's. A count in the final delta is still exact.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import { FAKE_ANTHROPIC_PREFIX, fakeTokenCount, startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import type { FakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { startPipelineNode, withClaudeRoute } from './pipeline/pipeline-harness.js';
import type { PipelineNode } from './pipeline/pipeline-harness.js';

// A long answer (the fake echoes the prompt): ~250 tokens after the running count of its first word.
const PROMPT = 'word '.repeat(200);
const ANSWER = FAKE_ANTHROPIC_PREFIX + PROMPT;
const message = { model: 'claude', max_tokens: 1000, messages: [{ role: 'user' as const, content: PROMPT }] };

async function nodeWith(t: { teardown(fn: () => unknown): void }): Promise<{ node: PipelineNode; anthropic: FakeAnthropicUpstream }> {
  const upstream = await startFakeUpstream(t);
  const anthropic = await startFakeAnthropicUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, bundle: (base) => withClaudeRoute(base, anthropic.url) });
  return { node, anthropic };
}

const sdk = (node: PipelineNode): Anthropic => new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });

/** The usage the node metered the request at `index` with (the record's). */
const meteredUsage = (node: PipelineNode, index: number): Promise<{ inputTokens: number; outputTokens: number; estimated: boolean }> =>
  waitFor(() => node.finished[index]?.usage, { what: `request ${index} finished` });

t.test('a running count in an early delta, the final delta without usage: metered as at least the estimate, estimated, and the caller sees the record', async (t) => {
  const { node, anthropic } = await nodeWith(t);
  // The same answer without any usage: what the node estimates it as.
  anthropic.setBehaviour({ omitUsage: true });
  await sdk(node).messages.stream(message).finalMessage();
  const estimate = (await meteredUsage(node, 0)).outputTokens;
  const running = fakeTokenCount(FAKE_ANTHROPIC_PREFIX.split(' ')[0] + ' ');
  t.ok(estimate > running * 10, `the estimate (${estimate}) is well past the running count (${running})`);

  const cases: Array<[string, { runningDelta?: boolean; omitFinalDeltaUsage: true }]> = [
    ['only an early delta', { runningDelta: true, omitFinalDeltaUsage: true }],
    ['only message_start', { omitFinalDeltaUsage: true }],
  ];
  let index = 1;
  for (const [name, behaviour] of cases) {
    anthropic.setBehaviour(behaviour);
    const final = await sdk(node).messages.stream(message).finalMessage();
    const text = final.content[0]?.type === 'text' ? final.content[0].text : '';
    t.equal(text, ANSWER, `${name}: the answer came whole`);
    const metered = await meteredUsage(node, index++);
    t.equal(metered.estimated, true, `${name}: the record says estimated`);
    t.ok(metered.outputTokens >= estimate, `${name}: output ${metered.outputTokens} at least the estimate ${estimate}`);
    t.equal(metered.inputTokens, fakeTokenCount(PROMPT), `${name}: the upstream's input count kept`);
    t.equal(final.usage.output_tokens, metered.outputTokens, `${name}: the caller's output is the record's`);
    t.equal(final.usage.input_tokens, metered.inputTokens, `${name}: the caller's input is the record's`);
  }
});

t.test('the filled final delta on the wire carries the output count the record has', async (t) => {
  const { node, anthropic } = await nodeWith(t);
  anthropic.setBehaviour({ runningDelta: true, omitFinalDeltaUsage: true });
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ ...message, stream: true }),
  });
  t.equal(res.status, 200);
  const deltas = (await res.text())
    .split('\n\n')
    .filter((block) => block.startsWith('event: message_delta\n'))
    .map((block) => JSON.parse(block.split('\n')[1]?.replace(/^data: /, '') ?? '') as { delta: { stop_reason: string | null }; usage?: unknown });
  t.equal(deltas.length, 2, 'the running delta and the final one');
  const metered = await meteredUsage(node, 0);
  t.equal(metered.estimated, true);
  t.same(deltas[1]?.usage, { output_tokens: metered.outputTokens }, 'the final delta: the record output, message_start input kept');
});

t.test("an output count in the final delta is still the upstream's exact one, after a running delta too", async (t) => {
  const { node, anthropic } = await nodeWith(t);
  const exact = { inputTokens: fakeTokenCount(PROMPT), outputTokens: fakeTokenCount(ANSWER), estimated: false };
  let index = 0;
  for (const runningDelta of [false, true]) {
    anthropic.setBehaviour({ runningDelta });
    const final = await sdk(node).messages.stream(message).finalMessage();
    t.same(final.usage, { input_tokens: exact.inputTokens, output_tokens: exact.outputTokens }, `running delta: ${runningDelta}`);
    t.match(await meteredUsage(node, index++), exact, `running delta: ${runningDelta}`);
  }
});

t.test('content sent after a counted final delta is metered too: the count becomes a running one', async (t) => {
  const { node, anthropic } = await nodeWith(t);
  const counted = fakeTokenCount(ANSWER);
  anthropic.setBehaviour({ contentAfterFinalDelta: 'more '.repeat(400) });
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ ...message, stream: true }),
  });
  t.equal(res.status, 200);
  t.match(await res.text(), /more more more/, 'the late content reached the caller');
  const metered = await meteredUsage(node, 0);
  t.equal(metered.estimated, true, 'estimated: the final delta did not cover the whole answer');
  t.ok(metered.outputTokens > counted + 200, `output ${metered.outputTokens} covers the ${counted} counted and the 400 words after them`);
});
