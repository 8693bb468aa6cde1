// The node's metrics as a real app feeds them: requests answered before the pipeline counted once,
// the ejected-target gauge following config pushes, and a stream's upstream time to its last event.
import net from 'node:net';
import t from 'tap';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import type { RuntimeConfig } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { createNodePipelineMetrics } from '../../../edge-node/src/metrics/node-pipeline-metrics.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import type { ConfigBundle } from '../../../proto/src/index.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';
import { listenOnLoopback } from '../node-harness.js';
import { parsePrometheusText, sampleValue } from './prometheus-text.js';
import { closedPort } from '../../fixtures/loopback-server.js';

async function startMetricsNode(t: { teardown(fn: () => unknown): void }, upstreamUrl: string, opts: { maxBodyBytes?: number; onFinished?: (ctx: PipelineContext) => void } = {}) {
  const key = newCallerKey();
  const config = (version: number, overrides: Partial<ConfigBundle> & { upstreamUrl?: string } = {}): RuntimeConfig =>
    fromBundle(testBundle({ nodeId: 'node-1', version, upstreamUrl, keys: [bundleKey('key-a', key.sha256)], ...overrides }));
  const holder = ConfigHolder.ready(config(1));
  const metrics = createNodePipelineMetrics(() => ({ spoolBytes: 0, backfillBacklog: 0 }));
  const finished = opts.onFinished;
  const app = await buildApp({
    holder,
    logger: createLogger({ level: 'silent' }),
    services: { metrics: finished === undefined ? metrics : { ...metrics, requestFinished: (ctx) => (metrics.requestFinished(ctx), finished(ctx)) } },
    ...(opts.maxBodyBytes !== undefined ? { maxBodyBytes: opts.maxBodyBytes } : {}),
  });
  const { origin } = await listenOnLoopback(t, app);
  const chat = async (body: unknown, headers: Record<string, string> = {}): Promise<number> => {
    const res = await fetch(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
    await res.arrayBuffer();
    return res.status;
  };
  return { origin, holder, config, chat, scrape: () => parsePrometheusText(metrics.render()) };
}

const hello = { model: 'echo', messages: [{ role: 'user', content: 'hi' }] };

t.test('requests answered before the pipeline are counted once, under api "none" with their code; the pipeline counts its own', async (t) => {
  const node = await startMetricsNode(t, `http://127.0.0.1:${await closedPort()}/v1`, { maxBodyBytes: 1024 });
  const post = async (path: string): Promise<number> => {
    const res = await fetch(`${node.origin}${path}`, { method: 'POST' });
    await res.arrayBuffer();
    return res.status;
  };
  const counted = () => node.scrape().samples.filter((s) => s.name === 'zenova_node_requests_total');

  t.equal(await node.chat({ ...hello, messages: [{ role: 'user', content: 'x'.repeat(4096) }] }), 413);
  t.equal(await node.chat('{"model": "echo",'), 400);
  t.equal(await node.chat(hello, { 'content-encoding': 'gzip' }), 415);
  t.equal(await post('/v1/chat/completion'), 404);
  // Before routing (fastify's frameworkErrors): no hook runs for it.
  t.equal(await post('/v1/chat%zz/completions'), 400);
  // Refused by the pipeline (authenticate): counted there, under its API, and not again.
  t.equal(await node.chat(hello, { authorization: 'Bearer zk-not-a-key' }), 401);
  // A caller that leaves before its body is in: the 100 Continue says the node has the request.
  const socket = net.connect(Number(new URL(node.origin).port), '127.0.0.1');
  const continued = new Promise<void>((resolve) => socket.on('data', (data) => data.toString('latin1').includes(' 100 ') && resolve()));
  socket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n');
  await continued;
  socket.write('{"model"');
  socket.destroy();

  // Counted when each response closes, which may come after the caller read it.
  await waitFor(() => counted().reduce((sum, s) => sum + s.value, 0) >= 7, { what: 'seven requests to be counted' });
  const series = counted()
    .map((s) => `${s.labels.api} ${s.labels.status} ${s.labels.code} ${s.value}`)
    .sort();
  t.same(series, [
    'chat.completions rejected ZN_ERR_API_KEY_INVALID 1',
    'none aborted none 1',
    'none rejected ZN_ERR_BODY_TOO_LARGE 1',
    'none rejected ZN_ERR_INVALID_JSON 1',
    'none rejected ZN_ERR_INVALID_REQUEST 1',
    'none rejected ZN_ERR_NOT_FOUND 1',
    'none rejected ZN_ERR_UNSUPPORTED_ENCODING 1',
  ]);
});

t.test('the ejected-target gauge falls to 0 once a config push fixes the upstream\'s base URL, and is gone once no route has the target', async (t) => {
  const good = await startFakeUpstream(t);
  const node = await startMetricsNode(t, `http://127.0.0.1:${await closedPort()}/v1`);
  const ejected = () => sampleValue(node.scrape(), 'zenova_node_upstream_target_ejected', { upstream: 'demo', model: 'demo-echo' });

  t.equal(ejected(), 0, 'a served target before any failure');
  // TargetHealth's default threshold: five connect errors in a row.
  for (let i = 0; i < 5; i++) t.equal(await node.chat(hello), 502);
  t.equal(ejected(), 1);

  node.holder.swap(node.config(2, { upstreamUrl: good.url }));
  t.equal(ejected(), 0, 'the fixed base URL is a target that never failed');
  t.equal(await node.chat(hello), 200);
  t.equal(ejected(), 0);

  node.holder.swap(node.config(3, { routes: [] }));
  t.equal(ejected(), undefined, 'no series for a target no route has');
  t.equal(sampleValue(node.scrape(), 'zenova_node_upstream_ejections_total', { upstream: 'demo', model: 'demo-echo' }), 1, 'the ejection stays counted');
});

t.test("a streamed answer's upstream duration runs to its last event, as the record's upstreamMs does", async (t) => {
  const upstream = await startFakeUpstream(t, { chunkDelayMs: 100 });
  let done: PipelineContext | undefined;
  const node = await startMetricsNode(t, upstream.url, { onFinished: (ctx) => (done = ctx) });
  t.equal(await node.chat({ ...hello, stream: true, messages: [{ role: 'user', content: 'one two three four five' }] }), 200);
  const ctx = await waitFor(() => done, { what: 'the request to finish' });
  const firstByteMs = ctx.upstreamFirstByteMs ?? t.fail('no first byte');
  const upstreamMs = ctx.upstreamMs ?? t.fail('no upstream time');
  t.ok(Number(upstreamMs) - Number(firstByteMs) >= 300, `the stream ran on after its first event (${firstByteMs} ms → ${upstreamMs} ms)`);
  const parsed = node.scrape();
  t.equal(sampleValue(parsed, 'zenova_node_upstream_duration_seconds_count', { upstream: 'demo', outcome: 'ok' }), 1);
  t.equal(sampleValue(parsed, 'zenova_node_upstream_duration_seconds_sum', { upstream: 'demo', outcome: 'ok' }), Number(upstreamMs) / 1000);
});
