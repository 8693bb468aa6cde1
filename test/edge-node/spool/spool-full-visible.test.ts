// A spool that refuses callers (at its quota under `reject`, or its writes failing) shows: one warn
// line at each crossing, /readyz not ready, `status` FULL with the quota, and live bytes as the
// quota counts them; doctor fails a state dir whose filesystem is nearly full.
import path from 'node:path';
import t from 'tap';
import { mountSmallDisk, tmpfsSkip } from '../../fixtures/small-disk.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { saveControlStatus } from '../../../edge-node/src/control/control-status.js';
import { runDoctor } from '../../../edge-node/src/doctor/doctor.js';
import { readiness } from '../../../edge-node/src/http/readiness.routes.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { createSpoolFile, SPOOL_FILE } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import type { SpoolLimits } from '../../../edge-node/src/spool/spool-store.js';
import { openStateStore } from '../../../edge-node/src/state/state-store.js';
import { formatNodeStatus, readNodeStatus } from '../../../edge-node/src/status/node-status.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { testBundle } from '../config-fixtures.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { NODE_ID, openRow, record, tempStateDir } from './spool-helpers.js';

const testConfig = () => fromBundle(testBundle({ nodeId: NODE_ID, version: 1, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [] }));
const BODY = { request: 'x'.repeat(8000), response: 'y', truncated: false };

function openStore(t: { teardown(fn: () => unknown): void }, dir: string, limits: SpoolLimits, lines: string[]): SpoolStore {
  const file = path.join(dir, SPOOL_FILE);
  const logger = createLogger({ level: 'info', destination: { write: (line: string) => void lines.push(line) } });
  const spool = new SpoolStore({ file, meta: createSpoolFile(file, NODE_ID), logger, limits: () => limits });
  t.teardown(() => spool.close());
  return spool;
}

const warnings = (lines: string[]): string[] => lines.filter((l) => /"level":40/.test(l)).map((l) => (JSON.parse(l) as { msg: string }).msg);

t.test('a spool at its quota logs one warning, refuses, is not ready, and status shows it FULL with the quota', async (t) => {
  const dir = tempStateDir(t);
  const lines: string[] = [];
  const limits: SpoolLimits = { quotaBytes: 256 * 1024, fullPolicy: 'reject' };
  const spool = openStore(t, dir, limits, lines);
  let changes = 0;
  spool.onStateChanged(() => (changes += 1));
  let i = 0;
  while (!spool.isFull()) await spool.finalise(record(`r-${i++}`, { bodies: BODY }));
  for (let n = 0; n < 5; n++) t.throws(() => spool.open(openRow(`new-${n}`)), { code: 'ZN_ERR_SPOOL_FULL' });
  t.same(warnings(lines), ['spool reached its quota; new requests are refused (ZN_ERR_SPOOL_FULL) until delivered records free room (check the control link) or the quota is raised'], 'one line, not one per refusal');
  t.equal(changes, 1);
  t.match(spool.state(), { quotaBytes: 256 * 1024, fullPolicy: 'reject', full: true, writeFailing: null });

  const ready = readiness({ holder: ConfigHolder.ready(testConfig()), spool: () => spool.state() });
  t.match(ready, { ready: false, code: 'ZN_ERR_SPOOL_FULL', reason: /at its quota .*new requests are refused/, spoolWarning: /at its quota/ });
  const metering = readiness({ holder: ConfigHolder.ready(testConfig()), spool: () => ({ ...spool.state(), fullPolicy: 'metering-only' }) });
  t.match(metering, { ready: true, spoolWarning: /served and metered without their bodies/ });

  // What serve mirrors into control-status.json (the spool's state with the link's).
  const store = await openStateStore(dir, { create: false });
  const { quotaBytes, fullPolicy, full, writeFailing } = spool.state();
  await saveControlStatus(store, {
    connected: true, since: new Date().toISOString(), lastError: null, sessionId: 's', pid: process.pid, serving: true, updatedAt: new Date().toISOString(),
    spool: { quotaBytes, fullPolicy, full, writeFailing },
  });
  const report = await readNodeStatus(store);
  t.match(report.spoolLimits, { quotaBytes: 256 * 1024, full: true });
  const text = formatNodeStatus({ ...report, enrolled: true, node: { id: NODE_ID, name: 'edge', enrolledAt: '2026-12-01T00:00:00Z' } });
  t.match(text, /spool:\s+\d+\.\d KiB of quota 256\.0 KiB \(policy reject\), backlog \d+ records not yet delivered/);
  t.match(text, /spool:\s+FULL \(quota 256\.0 KiB\): .*new requests are refused \(ZN_ERR_SPOOL_FULL\); deliver the backlog/);

  // The quota raised (a pushed config): one line again at the next commit, and ready.
  limits.quotaBytes = 64 * 1024 * 1024;
  await spool.finalise(record('after'));
  t.same(warnings(lines).slice(1), ['spool has room again below its quota']);
  t.equal(changes, 2);
  const again = readiness({ holder: ConfigHolder.ready(testConfig()), spool: () => spool.state() });
  t.match(again, { ready: true });
  t.equal(again.spoolWarning, undefined);
});

t.test('a spool whose writes fail is not ready and status says WRITES FAILING', async (t) => {
  const dir = tempStateDir(t);
  const spool = openStore(t, dir, { quotaBytes: 1024 ** 3, fullPolicy: 'reject' }, []);
  const writeFailing = { code: 'SQLITE_FULL', since: new Date().toISOString() };
  t.match(readiness({ holder: ConfigHolder.ready(testConfig()), spool: () => ({ ...spool.state(), writeFailing }) }), {
    ready: false,
    code: 'ZN_ERR_SPOOL_FULL',
    reason: /cannot be written since .* \(SQLITE_FULL\)/,
  });
  const store = await openStateStore(dir, { create: false });
  await saveControlStatus(store, {
    connected: true, since: new Date().toISOString(), lastError: null, sessionId: 's', pid: process.pid, serving: true, updatedAt: new Date().toISOString(),
    spool: { quotaBytes: 1024 ** 3, fullPolicy: 'reject', full: false, writeFailing },
  });
  const text = formatNodeStatus({ ...(await readNodeStatus(store)), enrolled: true, node: { id: NODE_ID, name: 'edge', enrolledAt: '2026-12-01T00:00:00Z' } });
  t.match(text, /spool:\s+WRITES FAILING: the request spool cannot be written since .* \(SQLITE_FULL\): new requests are refused/);
});

t.test('status shows the live bytes the quota and the heartbeat count, not the file size, after delivery', async (t) => {
  const dir = tempStateDir(t);
  const spool = openStore(t, dir, { quotaBytes: 1024 ** 3, fullPolicy: 'reject' }, []);
  for (let i = 0; i < 2000; i++) await spool.finalise(record(`r-${i}`, { bodies: BODY }));
  const rows = spool.backlogAfter(0, 5000);
  spool.deleteAcknowledged(rows[0]!.sequence, rows[rows.length - 1]!.sequence);
  const store = await openStateStore(dir, { create: false });
  let n = 0;
  const report = await waitFor(
    async () => {
      // A small record delivered at once: the commit that deletes it measures the file exactly,
      // and meanwhile the checkpoint worker lets the WAL shrink to its limit.
      await spool.finalise(record(`tick-${n++}`));
      const [row] = spool.backlogAfter(0, 1);
      const commits = spool.commitCount();
      spool.deleteAcknowledged(row!.sequence, row!.sequence);
      await waitFor(() => spool.commitCount() > commits, { what: 'the delete committed' });
      const r = await readNodeStatus(store);
      return r.spool !== null && r.spool.fileBytes > 2 * r.spool.bytes ? r : undefined;
    },
    { what: 'delivered records freed', timeoutMs: 60_000, intervalMs: 100 },
  );
  t.equal(report.spool?.bytes, spool.bytes(), 'the same figure as the heartbeat and the quota');
  const text = formatNodeStatus({ ...report, enrolled: true, node: { id: NODE_ID, name: 'edge', enrolledAt: '2026-12-01T00:00:00Z' } });
  t.match(text, /spool:\s+\d+\.\d MiB, backlog 0 records not yet delivered; the file takes \d+\.\d MiB on disk/);
});

t.test('doctor fails and status warns when the state dir\'s filesystem has less free space than the floor', { skip: tmpfsSkip() }, async (t) => {
  const dir = mountSmallDisk(t, '16m');
  await openStateStore(dir, { create: false });
  const checks = await runDoctor(dir);
  t.match(checks.find((c) => c.label.startsWith('free space')), {
    ok: false,
    label: /free space in .*'s filesystem: \d+\.\d MiB \(at least 64\.0 MiB wanted\)/,
    advice: /new requests are then refused \(ZN_ERR_SPOOL_FULL\): free space there/,
  });
  const report = await readNodeStatus(await openStateStore(dir, { create: false }));
  t.match(report.disk, { low: true, minFreeBytes: 64 * 1024 * 1024 });
  const text = formatNodeStatus({ ...report, enrolled: true, node: { id: NODE_ID, name: 'edge', enrolledAt: '2026-12-01T00:00:00Z' } });
  t.match(text, /disk:\s+LOW: \d+\.\d MiB free in .* \(below 64\.0 MiB\)/);
});
