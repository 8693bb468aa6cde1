// An Anthropic-compatible upstream that leaves `usage` out (message_start, message_delta, a JSON
// message) crashed the official SDK's stream helper ("Cannot read properties of undefined (reading
// 'output_tokens')") and broke its types' promise on a JSON message. The node now fills `usage`
// with the counts its record has (estimated), also when an output rule rewrote the text, keeps the
// SSE framing, and leaves an upstream's own usage as it came.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import { FAKE_ANTHROPIC_PREFIX, fakeTokenCount, startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bundleKey } from './config-fixtures.js';
import { startPipelineNode, withClaudeRoute } from './pipeline/pipeline-harness.js';
import type { PipelineNode } from './pipeline/pipeline-harness.js';

const PROMPT = 'hello there';
const message = { model: 'claude', max_tokens: 20, messages: [{ role: 'user' as const, content: PROMPT }] };

async function nodeWith(t: { teardown(fn: () => unknown): void }, omitUsage: boolean, guarded = false): Promise<PipelineNode> {
  const upstream = await startFakeUpstream(t);
  const anthropic = await startFakeAnthropicUpstream(t, { omitUsage });
  return startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base, keyHash) => ({
      ...withClaudeRoute(base, anthropic.url),
      ...(guarded
        ? {
            apiKeys: [bundleKey('key-a', keyHash, { guardrailPolicyId: 'policy-mask' })],
            guardrailPolicies: [{ id: 'policy-mask', name: 'mask', rules: [{ detector: 'keywords', keywords: ['there'], action: 'mask', on: 'output' }] }],
          }
        : {}),
    }),
  });
}

const sdk = (node: PipelineNode): Anthropic => new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });

/** The usage the node metered the request at `index` with (the record's). */
const meteredUsage = (node: PipelineNode, index: number): Promise<{ inputTokens: number; outputTokens: number; estimated: boolean }> =>
  waitFor(() => node.finished[index]?.usage, { what: `request ${index} finished` });

t.test("the SDK's stream helper reads a stream whose upstream sent no usage, with the counts the node metered", async (t) => {
  for (const guarded of [false, true]) {
    const node = await nodeWith(t, true, guarded);
    const final = await sdk(node).messages.stream(message).finalMessage();
    const text = final.content[0]?.type === 'text' ? final.content[0].text : '';
    t.ok(text.startsWith(FAKE_ANTHROPIC_PREFIX), `the answer came whole (guarded: ${guarded})`);
    if (guarded) t.notMatch(text, /there/, 'the output rule masked the text');
    const metered = await meteredUsage(node, 0);
    t.equal(metered.estimated, true, 'the record says estimated');
    t.ok(metered.outputTokens > 0);
    t.equal(final.usage.input_tokens, metered.inputTokens, `input as metered (guarded: ${guarded})`);
    t.equal(final.usage.output_tokens, metered.outputTokens, `output as metered (guarded: ${guarded})`);
  }
});

t.test('a JSON message whose upstream sent no usage carries the counts the node metered', async (t) => {
  for (const guarded of [false, true]) {
    const node = await nodeWith(t, true, guarded);
    const answer = await sdk(node).messages.create(message);
    const text = answer.content[0]?.type === 'text' ? answer.content[0].text : '';
    t.ok(text.startsWith(FAKE_ANTHROPIC_PREFIX));
    if (guarded) t.notMatch(text, /there/, 'the output rule masked the text');
    const metered = await meteredUsage(node, 0);
    t.equal(metered.estimated, true);
    t.same(answer.usage, { input_tokens: metered.inputTokens, output_tokens: metered.outputTokens }, `guarded: ${guarded}`);
  }
});

t.test('the filled stream keeps its SSE framing: every event named as its data, usage in message_start and message_delta', async (t) => {
  const node = await nodeWith(t, true);
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ ...message, stream: true }),
  });
  t.equal(res.status, 200);
  const body = await res.text();
  t.ok(body.endsWith('\n\n'));
  const events = body
    .slice(0, -2)
    .split('\n\n')
    .map((block) => {
      const lines = block.split('\n');
      t.equal(lines.length, 2, `one event: and one data: line (${block})`);
      const name = lines[0]?.replace(/^event: /, '');
      const data = JSON.parse(lines[1]?.replace(/^data: /, '') ?? '') as { type: string; message?: { usage?: unknown }; usage?: unknown };
      t.equal(data.type, name);
      return data;
    });
  t.same(
    events.map((e) => e.type).filter((type) => type !== 'content_block_delta'),
    ['message_start', 'content_block_start', 'ping', 'content_block_stop', 'message_delta', 'message_stop'],
  );
  const metered = await meteredUsage(node, 0);
  t.same(events.find((e) => e.type === 'message_start')?.message?.usage, { input_tokens: metered.inputTokens, output_tokens: 0 });
  t.same(events.find((e) => e.type === 'message_delta')?.usage, { input_tokens: metered.inputTokens, output_tokens: metered.outputTokens });
});

t.test("an upstream's own usage goes on as it came, streamed and as JSON", async (t) => {
  const node = await nodeWith(t, false);
  const inputTokens = fakeTokenCount(PROMPT);
  const outputTokens = fakeTokenCount(FAKE_ANTHROPIC_PREFIX + PROMPT);
  const final = await sdk(node).messages.stream(message).finalMessage();
  t.same(final.usage, { input_tokens: inputTokens, output_tokens: outputTokens });
  const answer = await sdk(node).messages.create(message);
  t.same(answer.usage, { input_tokens: inputTokens, output_tokens: outputTokens });
  t.match(await meteredUsage(node, 1), { inputTokens, outputTokens, estimated: false });
});
