// Usage of Anthropic streams that end before message_delta's final counts (the caller leaves, the
// upstream breaks, an output guardrail blocks): metered from what was delivered, marked estimated,
// never message_start's placeholder output count of 1. A complete stream keeps the exact counts.
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { RequestRecord } from '../../proto/src/index.js';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { estimateTokens } from '../../edge-node/src/providers/token-estimate.js';
import { FAKE_ANTHROPIC_PREFIX, fakeTokenCount, startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import type { FakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { recordsInto } from './anthropic-fixtures.js';

// 40 words: 40 text deltas, so the answer is far more than one token.
const PROMPT = Array.from({ length: 40 }, (_, i) => `word${i}`).join(' ');
const ANSWER = FAKE_ANTHROPIC_PREFIX + PROMPT;
// The fake's events before message_delta: message_start, content_block_start, ping, the deltas, content_block_stop.
const EVENTS_BEFORE_USAGE = 3 + (ANSWER.match(/\S+\s*|\s+/g) ?? []).length + 1;

interface Node {
  origin: string;
  secret: string;
  guardedSecret: string;
  records: RequestRecord[];
}

async function anthropicNode(t: { teardown(fn: () => unknown): void }, upstream: FakeAnthropicUpstream): Promise<Node> {
  const caller = newCallerKey();
  const guarded = newCallerKey();
  const bundle = testBundle({
    nodeId: 'node-usage',
    version: 1,
    upstreamUrl: upstream.url,
    keys: [bundleKey('key-1', caller.sha256), bundleKey('key-guarded', guarded.sha256, { guardrailPolicyId: 'policy-1' })],
    guardrailPolicies: [{ id: 'policy-1', name: 'block', rules: [{ detector: 'keywords', keywords: ['word30'], action: 'block', on: 'output' }] }],
    upstreams: [{ id: 'up-1', name: 'claude', kind: 'anthropic', baseUrl: upstream.url, apiKey: 'sk-ant-upstream-secret-0123456789', timeoutMs: 30_000 }],
    routes: [{ alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 }],
  });
  const records: RequestRecord[] = [];
  const spool = recordsInto(records);
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: 'node-usage', spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(async () => {
    const closing = app.close();
    app.server.closeAllConnections();
    await closing;
  });
  return { origin: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, secret: caller.secret, guardedSecret: guarded.secret, records };
}

function streamRequest(node: Node, secret: string, signal?: AbortSignal): Promise<Response> {
  return fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    ...(signal !== undefined ? { signal } : {}),
    headers: { 'content-type': 'application/json', 'x-api-key': secret },
    body: JSON.stringify({ model: 'claude', max_tokens: 500, stream: true, messages: [{ role: 'user', content: PROMPT }] }),
  });
}

/** The text of the text_delta events in an SSE body. */
function deliveredText(sse: string): string {
  let text = '';
  for (const block of sse.split('\n\n')) {
    const data = block.split('\n').find((line) => line.startsWith('data: '));
    if (data === undefined) continue;
    const event = JSON.parse(data.slice(6)) as { type?: string; delta?: { type?: string; text?: string } };
    if (event.type === 'content_block_delta' && event.delta?.type === 'text_delta') text += event.delta.text ?? '';
  }
  return text;
}

const recordOf = (node: Node, requestId: string | null): Promise<RequestRecord> =>
  waitFor(() => node.records.find((r) => r.requestId === requestId), { what: `the record of ${String(requestId)}` });

t.test('a caller that reads the whole answer and leaves before message_delta is metered for the text it was sent', async (t) => {
  const upstream = await startFakeAnthropicUpstream(t, { stallAfterEvents: EVENTS_BEFORE_USAGE });
  const node = await anthropicNode(t, upstream);
  const gone = new AbortController();
  const res = await streamRequest(node, node.secret, gone.signal);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let sse = '';
  while (!sse.includes('event: content_block_stop')) {
    const { value, done } = await reader.read();
    if (done) break;
    sse += decoder.decode(value, { stream: true });
  }
  gone.abort();
  t.equal(deliveredText(sse), ANSWER, 'the whole answer reached the caller');
  const record = await recordOf(node, res.headers.get('x-request-id'));
  t.equal(record.status, 'aborted');
  t.same(record.usage, { inputTokens: fakeTokenCount(PROMPT), outputTokens: estimateTokens(ANSWER), estimated: true });
});

t.test('a stream the upstream cuts before message_delta is metered for the text delivered, input from message_start', async (t) => {
  const cutAfter = EVENTS_BEFORE_USAGE - 11; // ten deltas and content_block_stop never arrive
  const upstream = await startFakeAnthropicUpstream(t, { cutStreamAfterEvents: cutAfter });
  const node = await anthropicNode(t, upstream);
  const res = await streamRequest(node, node.secret);
  const sse = await res.text();
  t.match(sse, /event: error/, 'the caller is told the stream broke');
  const delivered = deliveredText(sse);
  t.ok(delivered.length > 0 && ANSWER.startsWith(delivered) && delivered !== ANSWER, 'part of the answer was delivered');
  const record = await recordOf(node, res.headers.get('x-request-id'));
  t.match(record, { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_UNAVAILABLE' });
  t.same(record.usage, { inputTokens: fakeTokenCount(PROMPT), outputTokens: estimateTokens(delivered), estimated: true });
  t.ok(record.usage.outputTokens > 20, 'far more than the placeholder 1');
});

t.test('a stream an output guardrail blocks before message_delta is metered for the text delivered', async (t) => {
  const upstream = await startFakeAnthropicUpstream(t);
  const node = await anthropicNode(t, upstream);
  const res = await streamRequest(node, node.guardedSecret);
  const sse = await res.text();
  t.match(sse, /ZN_ERR_GUARDRAIL_BLOCKED/);
  const delivered = deliveredText(sse);
  t.notMatch(delivered, /word30/, 'the blocked word was not delivered');
  const record = await recordOf(node, res.headers.get('x-request-id'));
  t.match(record, { status: 'rejected', errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED' });
  t.equal(record.usage.inputTokens, fakeTokenCount(PROMPT));
  t.equal(record.usage.estimated, true);
  t.ok(record.usage.outputTokens >= estimateTokens(delivered) && record.usage.outputTokens > 20, `output tokens ${record.usage.outputTokens} cover the ${delivered.length} characters delivered`);
});

t.test('a complete stream keeps the exact usage from message_delta', async (t) => {
  const upstream = await startFakeAnthropicUpstream(t);
  const node = await anthropicNode(t, upstream);
  const res = await streamRequest(node, node.secret);
  const sse = await res.text();
  t.equal(deliveredText(sse), ANSWER);
  const record = await recordOf(node, res.headers.get('x-request-id'));
  t.match(record, { status: 'ok' });
  t.same(record.usage, { inputTokens: fakeTokenCount(PROMPT), outputTokens: fakeTokenCount(ANSWER), estimated: false });
});
