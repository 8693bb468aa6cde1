// A stream request whose upstream does not answer in time once it had the whole request — its
// headers late (UND_ERR_HEADERS_TIMEOUT, or the attempt's own timer first), or its 2xx headers in
// but its first event late — is not sent again to that target, as a JSON answer whose headers come
// late is not (headers-timeout-next-target.test.ts): the upstream goes on generating and bills each
// resend. The plan goes on with the next target; alone, the 504 says not to resend and the request
// is charged the prompt. A timeout while connecting (nothing sent) is still retried there. Before,
// a stream's route retries were all spent on the slow target, each charged by the upstream.
import t from 'tap';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { startRawUpstream } from '../../fixtures/raw-upstream.js';
import { startPipelineNode, withClaudeRoute } from '../pipeline/pipeline-harness.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';
import { RETRIES, TIMEOUT_MS, askSlow, finishedOf, silentTlsUpstream, slowRouteNode } from './timeout-route-fixtures.js';

type Teardown = { teardown(fn: () => unknown): void };

/** A streamed chat completion for alias `slow`. */
function askStream(node: PipelineNode): Promise<Response> {
  return askSlow(node, { stream: true });
}

/** The text a chat completion stream carried (its deltas' content, joined). */
function streamedText(sse: string): string {
  let text = '';
  for (const line of sse.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const chunk = JSON.parse(line.slice('data: '.length)) as { choices?: Array<{ delta?: { content?: string } }> };
    text += chunk.choices?.[0]?.delta?.content ?? '';
  }
  return text;
}

/** An upstream that sends a 200 event-stream head at once and then no event, until the node hangs up. */
async function headersOnlyStreamUpstream(t: Teardown): Promise<{ url: string; requests: () => number }> {
  const raw = await startRawUpstream(t, (socket) => {
    socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n');
  });
  return { url: raw.url, requests: () => raw.requests };
}

t.test('a stream whose headers do not come in time is not resent to that target, and the fallback streams the answer', async (t) => {
  const slow = await startFakeUpstream(t, { hang: true });
  const backup = await startFakeUpstream(t);
  const node = await slowRouteNode(t, slow.url, backup.url);
  const res = await askStream(node);
  const text = await res.text();
  t.equal(res.status, 200, text.slice(0, 300));
  t.match(res.headers.get('content-type'), /text\/event-stream/);
  t.equal(streamedText(text), '[zenova demo upstream] echo: hi', 'the fallback answered the stream');
  t.match(text, /data: \[DONE\]/);
  t.equal(slow.requests.length, 1, `the slow target had the stream request once, its ${RETRIES} retries not spent there`);
  t.equal(backup.requests.length, 1, 'the fallback had it once');
  const done = await finishedOf(node, res);
  t.match(done.attempts, [
    { upstream: 'demo', outcome: 'timeout', httpStatus: null },
    { upstream: 'backup', outcome: 'ok', httpStatus: 200 },
  ]);
  t.equal(done.attempts.length, 2);
  t.match(done, { outcome: { status: 'ok' }, usage: { estimated: false } }, "charged the fallback's answer, not the timed-out prompt as well");
});

t.test('alone, a stream headers timeout is one request to the upstream, charged the prompt, and a 504 ZN_ERR_UPSTREAM_TIMEOUT that says not to resend', async (t) => {
  const slow = await startFakeUpstream(t, { hang: true });
  const node = await slowRouteNode(t, slow.url);
  const res = await askStream(node);
  const body = (await res.json()) as { error?: { code?: string } };
  t.equal(res.status, 504, JSON.stringify(body));
  t.equal(body.error?.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
  t.equal(res.headers.get('x-should-retry'), 'false', 'the upstream goes on with the request: a resend would be billed again');
  t.equal(slow.requests.length, 1, 'no retry on the same target');
  const done = await finishedOf(node, res);
  t.match(done.attempts, [{ upstream: 'demo', outcome: 'timeout', httpStatus: null }]);
  t.equal(done.attempts.length, 1);
  t.match(done, { outcome: { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_TIMEOUT' }, usage: { outputTokens: 0, estimated: true } }, 'charged the prompt estimate, no output');
  t.ok(done.usage.inputTokens > 0, 'the prompt is charged');
});

t.test('a stream whose 2xx headers came but whose first event did not is not resent to that target either, and the fallback streams the answer', async (t) => {
  const slow = await headersOnlyStreamUpstream(t);
  const backup = await startFakeUpstream(t);
  const node = await slowRouteNode(t, slow.url, backup.url);
  const res = await askStream(node);
  const text = await res.text();
  t.equal(res.status, 200, text.slice(0, 300));
  t.equal(streamedText(text), '[zenova demo upstream] echo: hi', 'the fallback answered the stream');
  t.equal(slow.requests(), 1, `the silent stream had the request once, its ${RETRIES} retries not spent there`);
  t.equal(backup.requests.length, 1);
  const done = await finishedOf(node, res);
  t.match(done.attempts, [
    { upstream: 'demo', outcome: 'timeout', httpStatus: null },
    { upstream: 'backup', outcome: 'ok', httpStatus: 200 },
  ]);
  t.equal(done.attempts.length, 2);
});

t.test('alone, a stream whose first event does not come in time is one request, charged the prompt, and a 504 that says not to resend', async (t) => {
  const slow = await headersOnlyStreamUpstream(t);
  const node = await slowRouteNode(t, slow.url);
  const res = await askStream(node);
  const body = (await res.json()) as { error?: { code?: string } };
  t.equal(res.status, 504, JSON.stringify(body));
  t.equal(body.error?.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
  t.equal(res.headers.get('x-should-retry'), 'false');
  t.equal(slow.requests(), 1, 'no retry on the same target');
  const done = await finishedOf(node, res);
  t.equal(done.attempts.length, 1);
  t.match(done, { outcome: { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_TIMEOUT' }, usage: { outputTokens: 0, estimated: true } });
  t.ok(done.usage.inputTokens > 0, 'the prompt is charged');
});

t.test('an Anthropic messages stream whose headers do not come in time is one request to the upstream and a 504 that says not to resend', async (t) => {
  const slow = await startFakeUpstream(t, { hang: true });
  const node = await startPipelineNode(t, {
    upstreamUrl: slow.url,
    bundle: (base) => {
      const claude = withClaudeRoute(base, slow.url);
      return { ...claude, routes: claude.routes.map((r) => (r.alias === 'claude' ? { ...r, timeoutMs: TIMEOUT_MS, retries: RETRIES } : r)) };
    },
  });
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret },
    body: JSON.stringify({ model: 'claude', max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    signal: AbortSignal.timeout(10_000),
  });
  const body = (await res.json()) as { type?: string; error?: { code?: string } };
  t.equal(res.status, 504, JSON.stringify(body));
  t.equal(body.type, 'error');
  t.equal(body.error?.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
  t.equal(res.headers.get('x-should-retry'), 'false');
  t.equal(slow.requests.length, 1, 'no retry on the same target');
});

t.test('a stream connect timeout (nothing sent) is still retried on the same target, charged nothing, and its 504 may be resent', async (t) => {
  const silent = await silentTlsUpstream();
  const node = await slowRouteNode(t, silent.url);
  // After the node's own teardown is registered, so it runs first and its pools do not wait for
  // the connect timeout when they close.
  t.teardown(silent.release);
  const res = await askStream(node);
  const body = (await res.json()) as { error?: { code?: string } };
  t.equal(res.status, 504, JSON.stringify(body));
  t.equal(body.error?.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
  t.equal(res.headers.get('x-should-retry'), 'true', 'the upstream never had the request');
  t.equal(silent.connections(), RETRIES + 1, 'every retry went to the target');
  const done = await finishedOf(node, res);
  t.equal(done.attempts.length, RETRIES + 1);
  t.match(done.attempts, [{ upstream: 'demo', outcome: 'timeout' }, { upstream: 'demo', outcome: 'timeout' }, { upstream: 'demo', outcome: 'timeout' }]);
  t.equal(done.usage.inputTokens, 0, 'nothing is charged');
});
