// A request must arrive in full within its request timeout, else it is answered 408 (errors.md: "too
// slow to arrive"); before, headers followed by a body that never ended held the request open
// forever. The timeout ends once the body is in: a long streamed answer is never cut by it.
import t from 'tap';
import { rawSocket } from '../fixtures/raw-socket.js';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { DEFAULT_MAX_BODY_BYTES } from '../../edge-node/src/config/local-config.js';
import { fromLocalConfig } from '../../edge-node/src/config/runtime-config.js';
import { requestTimeoutFor } from '../../edge-node/src/http/request-timeout.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { testConfig } from './node-harness.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';

const REQUEST_TIMEOUT_MS = 1000;

t.test('by default a request has long enough to upload the body limit at 32 KiB/s, and never less than 2 minutes', async (t) => {
  t.equal(requestTimeoutFor(DEFAULT_MAX_BODY_BYTES), 128_000);
  t.equal(requestTimeoutFor(1024), 120_000);
  t.equal(requestTimeoutFor(256 * 1024 * 1024), 8_192_000);
  const upstream = await startFakeUpstream(t);
  const app = await buildApp({ holder: ConfigHolder.ready(fromLocalConfig(testConfig(upstream.url))), logger: createLogger({ level: 'silent' }) });
  t.teardown(() => app.close());
  t.equal(app.server.requestTimeout, 128_000, "the node's HTTP server has it");
  t.equal(app.server.headersTimeout, 60_000, "and Node's own headers timeout");
});

t.test('a body that never finishes arriving is answered 408 once the request timeout passes', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, requestTimeoutMs: REQUEST_TIMEOUT_MS });
  const { socket, answer: received, closed } = rawSocket(t, node.origin);
  // Complete headers, no key, a body promised and never sent in full.
  socket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n{"model":"echo"');
  await waitFor(() => closed(), { what: 'the node to answer and close the connection', timeoutMs: 30_000 });
  const answer = received();
  t.match(answer, /^HTTP\/1\.1 408 Request Timeout\r\n/);
  t.match(answer, /\r\nx-should-retry: false\r\n/i);
  t.match(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)), { error: { code: 'ZN_ERR_INVALID_REQUEST', message: /took too long to arrive/ } });
  const line = await waitFor(() => node.logs().find((l) => l.msg === 'request finished'), { what: 'the request finished line' });
  t.match(line, { status: 408, errorCode: 'ZN_ERR_INVALID_REQUEST', outcome: 'rejected' }, 'logged as the 408 it was answered');
  t.notOk('callerAborted' in line, 'the caller did not leave: the node answered');
  t.notOk(node.logs().some((l) => (l.level as number) >= 50), 'no error-level log line');
  t.equal(upstream.requests.length, 0, 'nothing was forwarded');
});

t.test('a streamed answer that lasts longer than the request timeout still completes', async (t) => {
  // The demo upstream streams the echoed prompt a word at a time.
  const upstream = await startFakeUpstream(t, { chunkDelayMs: 150 });
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, requestTimeoutMs: REQUEST_TIMEOUT_MS });
  const started = performance.now();
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen' }] }),
  });
  t.equal(res.status, 200);
  const text = await res.text();
  const lasted = performance.now() - started;
  // The stream's length comes from the upstream's delays (over 20 chunks × 150 ms), never from load.
  t.ok(lasted > 2 * REQUEST_TIMEOUT_MS, `the answer outlasted the request timeout twice over (${Math.round(lasted)} ms)`);
  t.match(text, /data: \[DONE\]\n\n$/, 'and ended with [DONE]');
  t.match(text, /fifteen/, 'every word arrived');
});
