// A caller that leaves before the upstream's answer came is charged the prompt once the upstream
// had the whole request (it goes on generating and bills it: a JSON answer comes only when it is
// done), and nothing while the node was still connecting to it (docs/billing.md, "Stage settle").
// Leaving (or the attempt's timer) while the node connects ends the attempt at once.
import t from 'tap';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { silentStreamUpstream } from '../../fixtures/loopback-server.js';
import { waitFor } from '../../fixtures/wait-for.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';
import { silentTlsUpstream } from '../routing/timeout-route-fixtures.js';
import { pricedNode } from './priced-node.js';

const PROMPT = 'Summarise the history of the Grand Canal in three hundred words, please.';

/** Sends a chat request and leaves once `ready` says so; resolves when the caller has left. */
async function leaveWhen(node: PipelineNode, stream: boolean, ready: () => boolean): Promise<void> {
  const gone = new AbortController();
  const pending = fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', stream, max_tokens: 50, messages: [{ role: 'user', content: PROMPT }] }),
    signal: gone.signal,
  }).then((res) => res.body?.cancel(), (err: unknown) => err);
  await waitFor(() => ready() || undefined, { what: 'the moment to leave' });
  gone.abort();
  await pending;
}

t.test('a caller that leaves while the upstream works on a JSON answer is charged the prompt, estimated, and no output', async (t) => {
  const upstream = await startFakeUpstream(t, { hang: true });
  const { node, finished } = await pricedNode(t, upstream.url);
  await leaveWhen(node, false, () => upstream.requests.length === 1);
  await waitFor(() => upstream.abortedCount() === 1 || undefined, { what: 'the upstream to see its call aborted' });
  const f = await waitFor(() => finished[0], { what: 'the request to finish' });
  t.equal(f.status, 'aborted');
  t.equal(f.upstream, 'demo', 'recorded as served by the upstream that had the request');
  t.ok(f.usage.inputTokens >= PROMPT.length / 4, 'the prompt is estimated');
  t.same(f.usage, { inputTokens: f.usage.inputTokens, outputTokens: 0, estimated: true });
  t.equal(f.cost.costMicros, f.usage.inputTokens, 'charged the prompt at its price');
});

t.test('a caller that leaves before a stream’s first event is charged the prompt too', async (t) => {
  const { url, received } = await silentStreamUpstream(t);
  const { node, finished } = await pricedNode(t, url);
  await leaveWhen(node, true, () => received() === 1);
  const f = await waitFor(() => finished[0], { what: 'the request to finish' });
  t.equal(f.status, 'aborted');
  t.equal(f.upstream, 'demo');
  t.ok(f.usage.inputTokens > 0 && f.usage.estimated);
  t.equal(f.cost.costMicros, f.usage.inputTokens);
});

t.test('a caller that leaves while the node is still connecting to the upstream is charged nothing, and its request ends at once, not at the connect timeout', async (t) => {
  const upstream = await silentTlsUpstream();
  const { node, finished } = await pricedNode(t, upstream.url);
  // After the node's own teardown is registered, so it runs first (tap: last in, first out) and
  // the node's pools do not wait for the connect timeout when they close.
  t.teardown(upstream.release);
  await leaveWhen(node, false, () => upstream.connections() === 1);
  // The upstream's connect timeout is 10 s: a request held until it would miss this deadline.
  const f = await waitFor(() => finished[0], { what: 'the request to finish', timeoutMs: 5_000 });
  t.equal(f.status, 'aborted');
  t.equal(f.upstream, undefined, 'no upstream had the request');
  t.same(f.usage, { inputTokens: 0, outputTokens: 0, estimated: false });
  t.equal(f.cost.costMicros, 0);
});

t.test("an attempt whose route timeout passes while the node is still connecting times out then, not at the upstream's connect timeout, charged nothing and may be resent", async (t) => {
  const upstream = await silentTlsUpstream();
  const { node, finished } = await pricedNode(t, upstream.url, { route: (route) => ({ ...route, timeoutMs: 300 }) });
  t.teardown(upstream.release);
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: PROMPT }] }),
    signal: AbortSignal.timeout(5_000),
  });
  t.equal(res.status, 504);
  t.equal(((await res.json()) as { error: { code: string } }).error.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
  t.equal(res.headers.get('x-should-retry'), 'true', 'the upstream never had the request');
  const f = await waitFor(() => finished[0], { what: 'the record' });
  t.equal(f.upstream, undefined);
  t.equal(f.cost.costMicros, 0);
  t.same(f.usage, { inputTokens: 0, outputTokens: 0, estimated: false });
});
