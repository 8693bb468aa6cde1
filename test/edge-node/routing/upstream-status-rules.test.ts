// What an upstream's error status decides (docs/node-api.md "Routing", docs/errors.md
// ZN_ERR_UPSTREAM_ERROR): a 400 is final, a 429 goes to the next target only with its Retry-After
// and without counting against the target's health, a 408 (the upstream's own request timeout) is
// retried and fallen back from like a timeout. The status decides even when the error body that
// follows it stalls past the attempt's timeout: that used to turn the attempt into a plain timeout,
// so a 400 fell back (sent twice) and a 429 was retried at once and ejected its target.
// And a stream attempt that fails before its first event meters none of the usage it read.
import t from 'tap';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { SSE_HEAD_CHUNKED, httpChunk, startRawUpstream } from '../../fixtures/raw-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { TargetHealth } from '../../../edge-node/src/routing/target-health.js';
import type { RuntimeTarget } from '../../../edge-node/src/config/runtime-config.js';
import { sdkError, startPipelineNode } from '../pipeline/pipeline-harness.js';

type Teardown = Parameters<typeof startRawUpstream>[0];

const ask = (model: string) => ({ model, messages: [{ role: 'user' as const, content: 'hi' }] });

/** An upstream answering `status` with a JSON error body announced at 200 bytes, of which 10 come. */
function stallingErrorUpstream(t: Teardown, status: number, extraHead = '') {
  return startRawUpstream(t, (socket) => {
    socket.write(`HTTP/1.1 ${status} Err\r\ncontent-type: application/json\r\ncontent-length: 200\r\n${extraHead}\r\n{"error":{`);
  });
}

/** A node whose alias `r` goes to `primaryUrl` (as upstream `demo`), then falls back to `backupUrl`. */
function nodeWithFallback(t: Teardown, primaryUrl: string, backupUrl: string, timeoutMs: number) {
  return startPipelineNode(t, {
    upstreamUrl: primaryUrl,
    bundle: (base) => ({
      upstreams: [...base.upstreams, { id: 'up-b', name: 'backup', kind: 'openai-compatible', baseUrl: backupUrl, apiKey: 'sk-backup', timeoutMs: 30_000 }],
      routes: [{ alias: 'r', targets: [{ upstream: 'demo', model: 'm', weight: 1 }], fallbacks: [{ upstream: 'backup', model: 'demo-echo' }], timeoutMs, retries: 0 }],
    }),
  });
}

t.test('an upstream 400 whose error body stalls past the timeout is still final: the fallback is not asked and the caller gets the 400', async (t) => {
  const bad = await stallingErrorUpstream(t, 400);
  const backup = await startFakeUpstream(t);
  const node = await nodeWithFallback(t, bad.url, backup.url, 300);
  const err = await sdkError(node.client().chat.completions.create(ask('r')));
  t.equal(err.status, 400);
  t.equal(backup.requests.length, 0, 'not sent again to the fallback');
  t.equal(bad.requests, 1);
});

t.test('an upstream 429 whose error body stalls past the timeout goes to the next target only, keeps its Retry-After and does not count against health', async (t) => {
  const limited = await stallingErrorUpstream(t, 429, 'retry-after: 7\r\n');
  const health = new TargetHealth({ failureThreshold: 2 });
  const node = await startPipelineNode(t, {
    upstreamUrl: limited.url,
    bundle: () => ({ routes: [{ alias: 'r', targets: [{ upstream: 'demo', model: 'm', weight: 1 }], fallbacks: [], timeoutMs: 300, retries: 2 }] }),
    services: { targetHealth: health },
  });
  const err = await sdkError(node.client().chat.completions.create(ask('r')));
  t.equal(err.status, 429, 'the 429 is the last word');
  t.equal(err.headers?.get('retry-after'), '7', "with the upstream's Retry-After");
  t.equal(limited.requests, 1, 'the rate-limited target is not retried at once');
  const target = { upstream: { name: 'demo', baseUrl: limited.url, kind: 'openai-compatible', timeoutMs: 30_000 }, upstreamModel: 'm', weight: 1 } as unknown as RuntimeTarget;
  t.equal(health.isEjected(target), false, 'a rate limit does not eject the target');
});

t.test('an upstream 408 (its own request timeout) falls back like a timeout, and the fallback answers', async (t) => {
  const primary = await startFakeUpstream(t);
  const backup = await startFakeUpstream(t);
  const node = await nodeWithFallback(t, primary.url, backup.url, 30_000);
  primary.setBehaviour({ failNext: { count: 1, status: 408 } });
  const answer = await node.client().chat.completions.create(ask('r'));
  t.ok(answer.choices.length > 0, 'answered');
  t.equal(primary.requests.length, 1);
  t.equal(backup.requests.length, 1, 'the fallback was asked');
});

t.test('a stream attempt that fails before its first event meters none of the usage its upstream sent first', async (t) => {
  const usageChunk = `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 5000, completion_tokens: 0, total_tokens: 5000 } })}\n\n`;
  const errorEvent = `event: error\ndata: ${JSON.stringify({ error: { type: 'server_error', code: 'overloaded' } })}\n\n`;
  const raw = await startRawUpstream(t, (socket) => {
    socket.end(SSE_HEAD_CHUNKED + httpChunk(usageChunk) + httpChunk(errorEvent) + '0\r\n\r\n');
  });
  const node = await startPipelineNode(t, { upstreamUrl: raw.url });
  const err = await sdkError(node.client().chat.completions.create({ ...ask('echo'), stream: true }));
  t.equal(err.status, 502);
  const requestId = err.headers?.get('x-request-id');
  const done = await waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: 'the finished request', timeoutMs: 5000 });
  t.equal(done.outcome.status, 'failed');
  t.same({ input: done.usage.inputTokens, output: done.usage.outputTokens }, { input: 0, output: 0 }, 'no upstream answered: no tokens');
});
