// The bench's "node-side mean time per request" table is read from the node's real admin port:
// every stage the node timed is a row, and a scrape it cannot make a row of says why rather than
// printing a header with nothing under it (which reads as a node that spent no time).
import { performance } from 'node:perf_hooks';
import t from 'tap';
import type { Test } from 'tap';
import { startAdminServer } from '../../edge-node/src/metrics/admin-server.js';
import { createNodeMetrics } from '../../edge-node/src/metrics/create-node-metrics.js';
import { startGcMetrics } from '../../edge-node/src/metrics/gc-metrics.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { waitFor } from '../fixtures/wait-for.js';
import { createNodePipelineMetrics } from '../../edge-node/src/metrics/node-pipeline-metrics.js';
import { ManualClock, callContext } from '../edge-node/rate-limit/limit-fixtures.js';
import { gcDifference, gcTable, nodeGcTotals, nodeStageTimes } from './gateway-node-metrics.js';

const figures = (): { spoolBytes: number; backfillBacklog: number } => ({ spoolBytes: 0, backfillBacklog: 0 });

async function adminServing(t: Test, renderMetrics: () => string): Promise<string> {
  const admin = await startAdminServer({ host: '127.0.0.1', port: 0, renderMetrics });
  t.teardown(() => admin.close());
  return admin.url;
}

t.test("the stage table has a row per stage the node timed and the request total, from the node's own /metrics", async (t) => {
  const clock = new ManualClock();
  const metrics = createNodePipelineMetrics(figures);
  for (let i = 0; i < 4; i++) {
    const ctx = callContext(clock);
    ctx.stagesUs = { identify: 12, authenticate: 8, forward: 2_000, spool: 300 };
    ctx.attempts = [{ upstream: 'fake', model: 'demo-echo', outcome: 'ok', httpStatus: 200, durationMs: 1.5 }];
    ctx.upstreamMs = 1.5;
    clock.advance(3);
    metrics.requestFinished(ctx);
  }
  const gc = startGcMetrics();
  t.teardown(() => gc.stop());
  const table = await nodeStageTimes(await adminServing(t, () => metrics.render() + gc.render()));
  t.match(table, /^\| part \| mean µs \|\n\|---\|---:\|$/m);
  t.match(table, /^\| stage identify \| 12 \|$/m);
  t.match(table, /^\| stage forward \| 2000 \|$/m);
  t.match(table, /^\| stage spool \| 300 \|$/m);
  t.match(table, /^\| \(upstream attempt, inside forward\) \| 1500 \|$/m);
  t.match(table, /^\| request total \(arrival → end of answer\), 4 requests \| 3000 \|$/m);
  t.match(table, /^\| outside the stages \(HTTP, hooks, reply\) \| 680 \|$/m);
  t.notMatch(table, /stage surface/, 'a stage no request reached has no row');
});

t.test('a node that has timed no request yet says so instead of printing an empty table', async (t) => {
  const metrics = createNodePipelineMetrics(figures);
  const table = await nodeStageTimes(await adminServing(t, () => metrics.render()));
  t.notMatch(table, /\| part \|/);
  t.match(table, /^node-side mean time per request .*: none to show, the node has timed no request/);
});

t.test("a /metrics answer without the node's stage series says so instead of printing an empty table", async (t) => {
  // What another process answering on the admin port, or a body cut short after the GC family, looks like.
  const gc = startGcMetrics();
  t.teardown(() => gc.stop());
  const text = gc.render();
  const table = await nodeStageTimes(await adminServing(t, () => text));
  t.notMatch(table, /\| part \|/);
  t.match(table, `holds no zenova_node_stage_duration_seconds samples`);
  t.match(table, `${Buffer.byteLength(text)} bytes`);
});

t.test('a /metrics answer other than 200 is an error naming its status', async (t) => {
  const url = await adminServing(t, () => {
    throw new Error('render failed');
  });
  await t.rejects(nodeStageTimes(url), /GET \/metrics: HTTP 500/);
});

t.test("the GC and event-loop table is the difference of the node's own figures around a load, per second of it", async (t) => {
  const node = await createNodeMetrics({ adminListen: { host: '127.0.0.1', port: 0 }, figures, logger: createLogger({ level: 'silent' }) });
  t.teardown(() => node.close());
  const adminUrl = node.adminUrl ?? '';
  // The probe runs every 20 ms: a few observations first, so the stall below is one of many.
  const before = await waitFor(async () => {
    const totals = await nodeGcTotals(adminUrl);
    return totals.loopBusySeconds > 0 ? totals : undefined;
  }, { what: 'the loop figures', intervalMs: 10 });
  const started = performance.now();
  while (performance.now() - started < 100);
  const after = await waitFor(async () => {
    const totals = await nodeGcTotals(adminUrl);
    return totals.loopStallsOver10ms > before.loopStallsOver10ms ? totals : undefined;
  }, { what: 'the stall to be counted', intervalMs: 10 });
  const load = gcDifference(after, before);
  t.ok(load.loopBusySeconds >= 0.1, 'the busy loop is counted');
  t.ok(load.loopStallsOver10ms >= 1);
  const table = gcTable(new Map([['open 500/s', { gc: load, seconds: 2, requests: 1000 }]]));
  t.match(table, /\| load \| young GCs .* \| loop busy % \| loop stalls > 10 ms per s \|$/m);
  const row = /^\| open 500\/s \|(.*)\|$/m.exec(table)?.[1]?.split('|').map((cell) => cell.trim()) ?? [];
  t.equal(row.length, 9, 'a cell under every column');
  t.ok(Number(row[7]) >= 5, `busy share of the 2 s: ${row[7]}`);
  t.equal(Number(row[8]), load.loopStallsOver10ms / 2);
});
