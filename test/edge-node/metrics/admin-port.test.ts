// The admin port serves /metrics and /healthz on loopback only: any other address is refused at
// start-up with a clear message, from the factory and from the command line; and the real
// `zenova-node serve --admin-listen 127.0.0.1:0` exposes its metrics.
import { writeFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import t from 'tap';
import { runCli } from '../../../edge-node/src/cli/run-cli.js';
import { parseCli } from '../../../edge-node/src/cli/args.js';
import { AdminListenRefusedError, isLoopbackHost, startAdminServer } from '../../../edge-node/src/metrics/admin-server.js';
import { createNodeMetrics } from '../../../edge-node/src/metrics/create-node-metrics.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { startProcess, tsEntry } from '../../fixtures/processes.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { CALLER_KEY, testConfig } from '../node-harness.js';
import { parsePrometheusText, sampleValue } from './prometheus-text.js';

const quiet = createLogger({ level: 'silent' });
const figures = (): { spoolBytes: number; backfillBacklog: number } => ({ spoolBytes: 0, backfillBacklog: 0 });

t.test('loopback addresses are told apart from everything else', async (t) => {
  for (const host of ['127.0.0.1', '127.8.9.10', '::1', '[::1]', 'localhost', '::ffff:127.0.0.1', '0:0:0:0:0:0:0:1']) t.ok(isLoopbackHost(host), host);
  for (const host of ['0.0.0.0', '::', '10.0.0.5', '192.168.1.20', '128.0.0.1', 'example.com', '::2', '']) t.notOk(isLoopbackHost(host), host);
});

t.test('a non-loopback admin address is refused before anything listens', async (t) => {
  const logLines: string[] = [];
  const logger = createLogger({ level: 'info', destination: { write: (line: string) => void logLines.push(line) } });
  await t.rejects(createNodeMetrics({ adminListen: { host: '0.0.0.0', port: 0 }, figures, logger }), AdminListenRefusedError);
  await t.rejects(startAdminServer({ host: '192.168.1.20', port: 0, renderMetrics: () => '' }), /loopback address such as 127\.0\.0\.1/);
  t.notOk(logLines.some((line) => line.includes('admin listening')));
});

t.test('the command line refuses a non-loopback --admin-listen or ZENOVA_NODE_ADMIN_LISTEN with exit 2', async (t) => {
  let stderr = '';
  const code = await runCli(['serve', '--config', '/nonexistent.json', '--admin-listen', '0.0.0.0:9100'], {
    stdout: { write: () => true },
    stderr: { write: (s: string) => (stderr += s) },
  });
  t.equal(code, 2);
  t.match(stderr, /--admin-listen must be a loopback address \(127\.0\.0\.1 or \[::1\]\), got "0\.0\.0\.0"/);
  t.throws(() => parseCli(['serve', '--config', 'c.json'], { ZENOVA_NODE_ADMIN_LISTEN: '10.1.2.3:9100' }), /ZENOVA_NODE_ADMIN_LISTEN must be a loopback address/);
  t.match(parseCli(['serve', '--config', 'c.json'], { ZENOVA_NODE_ADMIN_LISTEN: '127.0.0.1:9100' }), { adminListen: { host: '127.0.0.1', port: 9100 } });
  t.match(parseCli(['serve', '--config', 'c.json', '--admin-listen', '[::1]:0'], { ZENOVA_NODE_ADMIN_LISTEN: '127.0.0.1:9100' }), { adminListen: { host: '::1', port: 0 } }, 'the flag wins');
  t.notOk('adminListen' in parseCli(['serve', '--config', 'c.json']), 'off by default');
});

t.test('the admin port serves /metrics in the text format, /healthz, and 404 elsewhere', async (t) => {
  const logLines: string[] = [];
  const logger = createLogger({ level: 'info', destination: { write: (line: string) => void logLines.push(line) } });
  const node = await createNodeMetrics({ adminListen: { host: '127.0.0.1', port: 0 }, figures: () => ({ spoolBytes: 77, backfillBacklog: 3 }), logger });
  t.teardown(() => node.close());
  t.match(node.adminUrl, /^http:\/\/127\.0\.0\.1:\d+$/);
  t.ok(logLines.some((line) => line.includes('"msg":"admin listening"') && line.includes(`"url":"${node.adminUrl}"`)));

  const metrics = await fetch(`${node.adminUrl}/metrics`);
  t.equal(metrics.status, 200);
  t.equal(metrics.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8');
  const parsed = parsePrometheusText(await metrics.text());
  t.equal(sampleValue(parsed, 'zenova_node_spool_bytes'), 77);
  t.equal(sampleValue(parsed, 'zenova_node_backfill_backlog'), 3);

  const health = await fetch(`${node.adminUrl}/healthz`);
  t.equal(health.status, 200);
  t.equal((await fetch(`${node.adminUrl}/v1/models`)).status, 404);
  t.equal((await fetch(`${node.adminUrl}/metrics`, { method: 'POST' })).status, 405);
});

t.test("/metrics counts the node process's garbage-collection pauses by kind", async (t) => {
  const node = await createNodeMetrics({ adminListen: { host: '127.0.0.1', port: 0 }, figures, logger: quiet });
  t.teardown(() => node.close());
  const minorPauses = async (): Promise<number | undefined> =>
    sampleValue(parsePrometheusText(await (await fetch(`${node.adminUrl}/metrics`)).text()), 'zenova_node_gc_pause_seconds_count', { kind: 'minor' });
  const before = await minorPauses();
  t.type(before, 'number', 'the series is there before any collection it counts');
  // Young-generation garbage until a scavenge has run and been observed (the observer is called later).
  const after = await waitFor(async () => {
    new Array(100_000).fill(0).map((n: number) => ({ n }));
    const now = await minorPauses();
    return now !== undefined && now > (before ?? 0) ? now : undefined;
  }, { what: 'a young-generation GC pause to be counted', timeoutMs: 20_000, intervalMs: 10 });
  t.ok(after > (before ?? 0));
  const parsed = parsePrometheusText(await (await fetch(`${node.adminUrl}/metrics`)).text());
  t.ok((sampleValue(parsed, 'zenova_node_gc_pause_seconds_sum', { kind: 'minor' }) ?? 0) > 0, 'their time is summed');
  t.equal(sampleValue(parsed, 'zenova_node_gc_pause_seconds_bucket', { kind: 'minor', le: '+Inf' }), sampleValue(parsed, 'zenova_node_gc_pause_seconds_count', { kind: 'minor' }));
  for (const kind of ['major', 'incremental', 'weakcb']) t.type(sampleValue(parsed, 'zenova_node_gc_pause_seconds_count', { kind }), 'number', kind);
});

t.test("/metrics shows a stall of the node's event loop as one late probe of about its length, and counts its busy time", async (t) => {
  const node = await createNodeMetrics({ adminListen: { host: '127.0.0.1', port: 0 }, figures, logger: quiet });
  t.teardown(() => node.close());
  const scrape = async (): Promise<ReturnType<typeof parsePrometheusText>> => parsePrometheusText(await (await fetch(`${node.adminUrl}/metrics`)).text());
  const stallsOver = (parsed: ReturnType<typeof parsePrometheusText>, le: string): number =>
    (sampleValue(parsed, 'zenova_node_event_loop_delay_seconds_count') ?? 0) - (sampleValue(parsed, 'zenova_node_event_loop_delay_seconds_bucket', { le }) ?? 0);
  // The probe runs every 20 ms: wait for a few of its observations first.
  const before = await waitFor(async () => {
    const parsed = await scrape();
    return (sampleValue(parsed, 'zenova_node_event_loop_delay_seconds_count') ?? 0) >= 3 ? parsed : undefined;
  }, { what: 'the probe to observe', intervalMs: 10 });
  const busyBefore = sampleValue(before, 'zenova_node_event_loop_busy_seconds_total') ?? Number.NaN;
  t.ok(busyBefore >= 0, 'the busy time is there from the start');

  // A 150 ms synchronous task: the probe due meanwhile runs at least 130 ms late.
  const started = performance.now();
  while (performance.now() - started < 150);
  const after = await waitFor(async () => {
    const parsed = await scrape();
    return stallsOver(parsed, '0.1') > stallsOver(before, '0.1') ? parsed : undefined;
  }, { what: 'the stall to be observed', intervalMs: 10 });
  t.ok(stallsOver(after, '0.1') - stallsOver(before, '0.1') >= 1, 'an observation over 100 ms');
  const delaySum = (parsed: ReturnType<typeof parsePrometheusText>): number => sampleValue(parsed, 'zenova_node_event_loop_delay_seconds_sum') ?? 0;
  t.ok(delaySum(after) - delaySum(before) >= 0.13, 'of about the length of the stall');
  t.ok((sampleValue(after, 'zenova_node_event_loop_busy_seconds_total') ?? 0) - busyBefore >= 0.15, 'the task is counted as busy time');
});

t.test('closing the metrics frees the admin port', async (t) => {
  const node = await createNodeMetrics({ adminListen: { host: '127.0.0.1', port: 0 }, figures, logger: quiet });
  const port = Number(new URL(node.adminUrl ?? '').port);
  await node.close();
  await new Promise<void>((resolve, reject) => {
    const server = net.createServer().once('error', reject).listen({ host: '127.0.0.1', port }, () => server.close(() => resolve()));
  });
  t.pass('the port could be bound again');
});

t.test('zenova-node serve --admin-listen 127.0.0.1:0 logs its admin URL and exposes /metrics that count its requests', async (t) => {
  const upstream = await startFakeUpstream(t);
  const configFile = path.join(t.testdir(), 'node.json');
  await writeFile(configFile, JSON.stringify(testConfig(upstream.url)));
  const entry = tsEntry('edge-node/src/main.ts');
  const node = await startProcess({
    name: 'zenova-node',
    command: entry.command,
    args: [...entry.args, 'serve', '--config', configFile, '--listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0'],
    readyLine: /"msg":"node-edge listening"/,
    t,
  });
  const admin = JSON.parse(await node.waitForLine(/"msg":"admin listening"/)) as { url: string };
  const listening = JSON.parse(await node.waitForLine(/"msg":"node-edge listening"/)) as { url: string };
  t.match(admin.url, /^http:\/\/127\.0\.0\.1:\d+$/);
  t.not(admin.url, listening.url, 'the admin port is not the callers\' port');

  const first = parsePrometheusText(await (await fetch(`${admin.url}/metrics`)).text());
  t.ok(first.types.has('zenova_node_requests_total'));
  const before = sampleValue(first, 'zenova_node_requests_total', { api: 'models', status: 'ok' }) ?? 0;
  const models = await fetch(`${listening.url}/v1/models`, { headers: { authorization: `Bearer ${CALLER_KEY}` } });
  t.equal(models.status, 200);
  await waitFor(
    async () => (sampleValue(parsePrometheusText(await (await fetch(`${admin.url}/metrics`)).text()), 'zenova_node_requests_total', { api: 'models', status: 'ok' }) ?? 0) > before,
    { what: 'the models request to be counted on /metrics' },
  );
  t.equal((await fetch(`${listening.url}/metrics`)).status, 404, 'metrics are not on the callers\' port');
});

t.test('zenova-node serve with --admin-listen on a port already in use says so and exits 1, with no unexpected failure', async (t) => {
  const upstream = await startFakeUpstream(t);
  const configFile = path.join(t.testdir(), 'node.json');
  await writeFile(configFile, JSON.stringify(testConfig(upstream.url)));
  const busy = net.createServer();
  await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => busy.close(() => resolve())));
  const busyPort = (busy.address() as net.AddressInfo).port;
  const entry = tsEntry('edge-node/src/main.ts');
  const node = await startProcess({
    name: 'zenova-node',
    command: entry.command,
    args: [...entry.args, 'serve', '--config', configFile, '--listen', '127.0.0.1:0', '--admin-listen', `127.0.0.1:${busyPort}`],
    t,
  });
  const line = JSON.parse(await node.waitForLine(/"msg":"node-edge could not listen on its admin port"/)) as { adminListen: { port: number }; err: { code: string } };
  t.equal(line.adminListen.port, busyPort, 'names the admin address');
  t.equal(line.err.code, 'EADDRINUSE');
  t.equal((await node.exited).code, 1, 'exit 1');
  t.notMatch(node.output(), /unexpected failure/);
});
