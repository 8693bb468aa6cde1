// A caller that leaves: the upstream call is aborted (the upstream sees it), the request ends
// 'aborted', and what was streamed so far is metered (estimated, the upstream sent no usage yet).
import t from 'tap';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { startPipelineNode } from './pipeline-harness.js';

t.test('a caller that disconnects mid-stream aborts the upstream call and is metered for what it got', async (t) => {
  const upstream = await startFakeUpstream(t, { chunkDelayMs: 150 });
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const gone = new AbortController();
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'a long answer is coming your way now' }] }),
    signal: gone.signal,
  });
  const requestId = res.headers.get('x-request-id');
  const reader = res.body!.getReader();
  let received = '';
  // Wait for real content (the role chunk comes first; the alias "echo" is in every chunk), then leave.
  while (!received.includes('upstream]')) {
    const { value, done } = await reader.read();
    if (done) break;
    received += Buffer.from(value).toString('utf8');
  }
  gone.abort();
  await waitFor(() => upstream.abortedCount() === 1, { what: 'the upstream to see its call aborted' });
  const done = await waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: 'the request to finish' });
  t.equal(done.outcome.status, 'aborted');
  t.equal(done.usage.estimated, true, 'the upstream never sent usage: estimated');
  t.ok(done.usage.inputTokens > 0, 'the prompt is metered');
  t.ok(done.usage.outputTokens > 0, 'the part of the answer that was delivered is metered');
  t.ok(done.stages.includes('spool'), 'the tail stages ran');
  const line = await waitFor(() => node.logs().find((l) => l.msg === 'request finished' && l.requestId === requestId), { what: 'the log line' });
  t.equal(line.callerAborted, true);
});

t.test('a caller that leaves before the upstream answered aborts the call; the request ends aborted with 499', async (t) => {
  const upstream = await startFakeUpstream(t, { hang: true });
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const gone = new AbortController();
  const pending = fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'never answered' }] }),
    signal: gone.signal,
  }).catch((err: unknown) => err);
  await waitFor(() => upstream.requests.length === 1, { what: 'the call to reach the upstream' });
  gone.abort();
  await pending;
  await waitFor(() => upstream.abortedCount() === 1, { what: 'the upstream to see its call aborted' });
  const done = await waitFor(() => node.finished[0], { what: 'the request to finish' });
  t.same(done.outcome, { status: 'aborted', httpStatus: 499, errorCode: null });
  t.match(done.attempts, [{ upstream: 'demo', outcome: 'aborted' }]);
  t.ok(done.usage.inputTokens > 0 && done.usage.outputTokens === 0 && done.usage.estimated, 'the upstream had the prompt: it is metered (estimated), no output came');
  t.equal(upstream.requests.length, 1, 'an abort is never retried');
});
