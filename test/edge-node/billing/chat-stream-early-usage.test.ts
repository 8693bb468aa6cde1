// Usage on an OpenAI-compatible stream's early chunks (vLLM's continuous_usage_stats: running,
// cumulative counts on every chunk; some servers put usage on the first chunk) counts as partial
// until the stream finishes: a stream cut before [DONE] (and before every finish_reason) is charged
// output = max(the partial count, an estimate from the text delivered), marked estimated, as an
// Anthropic stream cut before message_delta is; a stream that finished uses the last usage seen
// (docs/billing.md, "Stage settle").
import t from 'tap';
import type http from 'node:http';
import { startScriptedUpstreamNode } from './scripted-upstream-node.js';

const PIECE = 'x'.repeat(400); // ≈100 tokens per content chunk
const PIECES = 5;
const body = { model: 'echo', stream: true, max_tokens: 2000, messages: [{ role: 'user', content: 'y'.repeat(4000) }] };

function chunk(delta: Record<string, unknown>, usage: unknown, finishReason: string | null = null): string {
  return `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index: 0, delta, finish_reason: finishReason }], usage })}\n\n`;
}

const usage = (completion: number): Record<string, unknown> => ({ prompt_tokens: 1000, completion_tokens: completion, total_tokens: 1000 + completion });

/**
 * A stream whose first chunk carries `firstUsage` and whose content chunks carry `pieceUsage(i)`
 * (counts after chunk i), then `end`: the upstream's connection dropped, or a proper finish.
 */
function stream(firstUsage: unknown, pieceUsage: (i: number) => unknown, end: 'cut' | 'done' | 'finish-reason-only' | 'done-without-final-usage'): (res: http.ServerResponse) => void {
  return (res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    let text = chunk({ role: 'assistant', content: '' }, firstUsage);
    for (let i = 1; i <= PIECES; i++) text += chunk({ content: PIECE }, pieceUsage(i));
    if (end === 'cut') {
      // No finish_reason, no final usage, no [DONE]: the connection drops once all this is written.
      res.write(text, () => res.socket?.destroy());
      return;
    }
    text += chunk({}, end === 'done-without-final-usage' ? null : usage(PIECES * 120), 'stop');
    res.end(end === 'finish-reason-only' ? text : `${text}data: [DONE]\n\n`);
  };
}

t.test('usage seen before an OpenAI-compatible stream finished is partial', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  const delivered = PIECES * 100;

  await t.test('a stream cut after usage on its first chunk is charged the output it delivered, estimated', async (t) => {
    node.answer(stream(usage(0), () => null, 'cut'));
    const { record } = await node.post('/v1/chat/completions', body);
    t.equal(record.status, 'failed', 'the cut stream failed');
    t.same(record.usage, { inputTokens: 1000, outputTokens: delivered, estimated: true });
    t.equal(record.cost.costMicros, 1000 * 3 + delivered * 15);
  });

  await t.test('a stream cut after running counts keeps the larger of the last count and the estimate, estimated', async (t) => {
    // Counts below the estimate (an upstream that counts fewer tokens), then above it.
    node.answer(stream(usage(0), (i) => usage(i * 50), 'cut'));
    t.same((await node.post('/v1/chat/completions', body)).record.usage, { inputTokens: 1000, outputTokens: delivered, estimated: true });
    node.answer(stream(usage(0), (i) => usage(i * 120), 'cut'));
    t.same((await node.post('/v1/chat/completions', body)).record.usage, { inputTokens: 1000, outputTokens: PIECES * 120, estimated: true });
  });

  await t.test('a stream that finished with [DONE] uses the last usage seen, exact', async (t) => {
    node.answer(stream(usage(0), (i) => usage(i * 120), 'done'));
    const { status, record } = await node.post('/v1/chat/completions', body);
    t.equal(status, 200);
    t.equal(record.status, 'ok');
    t.same(record.usage, { inputTokens: 1000, outputTokens: PIECES * 120, estimated: false });
  });

  await t.test('a stream that finished with [DONE] whose only usage came on its first chunk is charged the output it delivered, estimated', async (t) => {
    node.answer(stream(usage(0), () => null, 'done-without-final-usage'));
    const { status, record } = await node.post('/v1/chat/completions', body);
    t.equal(status, 200);
    t.equal(record.status, 'ok');
    t.same(record.usage, { inputTokens: 1000, outputTokens: delivered, estimated: true }, 'not 0: the block was a running count');
    t.equal(record.cost.costMicros, 1000 * 3 + delivered * 15);
  });

  await t.test('a stream that finished every choice but sent no [DONE] uses the last usage seen, exact', async (t) => {
    node.answer(stream(usage(0), (i) => usage(i * 120), 'finish-reason-only'));
    const { record } = await node.post('/v1/chat/completions', body);
    t.equal(record.status, 'ok');
    t.same(record.usage, { inputTokens: 1000, outputTokens: PIECES * 120, estimated: false });
  });
});

t.test("a failed attempt's usage is not billed as the usage of the attempt that answered", async (t) => {
  const node = await startScriptedUpstreamNode(t);
  // Attempt 1: a usage-only chunk, then the body ends without [DONE] before any content: retried.
  const failsAfterUsage = (res: http.ServerResponse): void => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(`data: ${JSON.stringify({ id: 'c0', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [], usage: usage(0) })}\n\n`);
  };
  // Attempt 2: a whole answer with [DONE] and no usage (an upstream that ignores include_usage).
  const answersWithoutUsage = (res: http.ServerResponse): void => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    let text = chunk({ role: 'assistant', content: '' }, null);
    for (let i = 1; i <= PIECES; i++) text += chunk({ content: PIECE }, null);
    res.end(`${text}${chunk({}, null, 'stop')}data: [DONE]\n\n`);
  };
  node.answer(failsAfterUsage, answersWithoutUsage);
  const { status, text, record } = await node.post('/v1/chat/completions', body);
  t.equal(node.calls(), 2, 'the failed attempt was retried');
  t.equal(status, 200);
  t.ok(text.includes(PIECE));
  t.equal(record.usage.estimated, true, 'the answering attempt gave no usage: estimated');
  t.ok(record.usage.outputTokens >= PIECES * 80, `the ≈${PIECES * 100} tokens delivered are billed (got ${record.usage.outputTokens})`);
});
