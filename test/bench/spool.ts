/**
 * `npm run bench:spool` (not a test): the spool's write cost with its durability settings next to
 * a bare better-sqlite3 insert loop on the same machine, and backfill throughput into PostgreSQL
 * while requests keep being spooled. Prints a table (copied into docs/spool.md).
 *
 * Writes: CONCURRENCY finalises are issued per event-loop turn (what concurrent requests do) and
 * awaited; µs/record is wall time / records. Backfill: the real BackfillChannel and the control
 * plane's real RecordBatch handler (ingestion into a migrated embedded PostgreSQL), joined in
 * process instead of over gRPC, while a "live traffic" loop spools LIVE_PER_MS records per ms.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { REQUEST_RECORD_SCHEMA_VERSION } from '../../proto/src/index.js';
import type { ControlMessage, NodeMessage, RequestRecord } from '../../proto/src/index.js';
import { migrate } from '../../control-plane/src/db/migrate.js';
import { createLogger as createCpLogger } from '../../control-plane/src/logger.js';
import { loadSettings } from '../../control-plane/src/settings.js';
import { recordBatchHandler } from '../../control-plane/src/records/record-batch-handler.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { BackfillChannel } from '../../edge-node/src/spool/backfill-channel.js';
import { createSpoolFile } from '../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../edge-node/src/spool/spool-store.js';
import type { SpoolSynchronous } from '../../edge-node/src/spool/spool-store.js';
import { startPostgres } from '../fixtures/postgres.js';

const RECORDS = Number(process.env.BENCH_RECORDS ?? 20_000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 64);
const BACKFILL_RECORDS = Number(process.env.BENCH_BACKFILL_RECORDS ?? 20_000);
const LIVE_PER_MS = 1;
const NODE_ID = 'bench-node';
const logger = createLogger({ level: 'silent' });

function sampleRecord(requestId: string): RequestRecord {
  const now = Date.now();
  return {
    schemaVersion: REQUEST_RECORD_SCHEMA_VERSION, requestId, nodeId: NODE_ID, configVersion: 7, receivedAt: now - 40, finishedAt: now,
    surface: 'model', api: 'chat.completions', keyId: 'key-bench', accountId: 'acct-bench', model: 'echo', upstream: 'demo', upstreamModel: 'demo-echo',
    stream: false, status: 'ok', httpStatus: 200, errorCode: null, usage: { inputTokens: 42, outputTokens: 128, estimated: false },
    cost: { reservedMicros: 5000, costMicros: 1700, leaseId: 'lease-bench', priced: true },
    timings: { totalMs: 40, upstreamFirstByteMs: 12, upstreamMs: 38, stagesUs: { identify: 20, authenticate: 8, route: 5, forward: 38000, meter: 3, spool: 30 } },
    attempts: [{ upstream: 'demo', model: 'demo-echo', outcome: 'ok', httpStatus: 200, durationMs: 38 }], guardrails: [],
    bodies: { request: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'x'.repeat(300) }] }), response: 'y'.repeat(400), truncated: false },
  };
}

function tempFile(): { file: string; cleanup: () => void } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-bench-spool-'));
  return { file: path.join(dir, 'spool.db'), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

function newStore(file: string, synchronous: SpoolSynchronous): SpoolStore {
  return new SpoolStore({ file, meta: createSpoolFile(file, NODE_ID), logger, limits: () => ({ quotaBytes: 64 * 1024 ** 3, fullPolicy: 'reject' }), synchronous });
}

async function spoolWrites(synchronous: SpoolSynchronous): Promise<{ perSec: number; usPer: number; commits: number }> {
  const { file, cleanup } = tempFile();
  const store = newStore(file, synchronous);
  const records = Array.from({ length: RECORDS }, (_, i) => sampleRecord(`w-${i}`));
  const started = performance.now();
  for (let i = 0; i < RECORDS; i += CONCURRENCY) {
    const slice = records.slice(i, i + CONCURRENCY);
    for (const r of slice) void store.open({ requestId: r.requestId, receivedAt: r.receivedAt, keyId: r.keyId, accountId: r.accountId, model: r.model, reservedMicros: 5000, leaseId: 'lease-bench' });
    await Promise.all(slice.map((r) => store.finalise(r)));
  }
  const ms = performance.now() - started;
  const commits = store.commitCount();
  await store.close();
  cleanup();
  return { perSec: (RECORDS / ms) * 1000, usPer: (ms * 1000) / RECORDS, commits };
}

function bareInserts(synchronous: 'NORMAL' | 'FULL', perTransaction: number): { perSec: number; usPer: number } {
  const { file, cleanup } = tempFile();
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${synchronous}`);
  db.exec('create table t (id integer primary key, request_id text not null unique, record_json text not null)');
  const insert = db.prepare('insert into t (request_id, record_json) values (?, ?)');
  const rows = Array.from({ length: RECORDS }, (_, i) => [`b-${i}`, JSON.stringify(sampleRecord(`b-${i}`))] as const);
  const many = db.transaction((slice: ReadonlyArray<readonly [string, string]>) => {
    for (const [id, json] of slice) insert.run(id, json);
  });
  const started = performance.now();
  for (let i = 0; i < RECORDS; i += perTransaction) many(rows.slice(i, i + perTransaction));
  const ms = performance.now() - started;
  db.close();
  cleanup();
  return { perSec: (RECORDS / ms) * 1000, usPer: (ms * 1000) / RECORDS };
}

async function backfillIntoPostgres(): Promise<{ perSec: number; live: number; ms: number }> {
  const pgdb = await startPostgres();
  const pool = new pg.Pool({ connectionString: pgdb.url, max: 4 });
  pool.on('error', () => undefined);
  const { file, cleanup } = tempFile();
  try {
    await migrate(pool);
    const settings = loadSettings({ ZENOVA_DATABASE_URL: pgdb.url, ZENOVA_ADMIN_TOKEN: `bench-${'x'.repeat(40)}` });
    const handler = recordBatchHandler({ pool, logger: createCpLogger(settings, { write: () => undefined }), settings });
    const store = newStore(file, 'normal');
    for (let i = 0; i < BACKFILL_RECORDS; i += 500) {
      await Promise.all(Array.from({ length: Math.min(500, BACKFILL_RECORDS - i) }, (_, j) => store.finalise(sampleRecord(`bf-${i + j}`))));
    }
    const channel = new BackfillChannel({ store, logger });
    // The control plane handles one message at a time per session, as the gateway does.
    let queue = Promise.resolve();
    const node = { nodeId: NODE_ID, nodeName: 'bench', sessionId: 'bench' };
    const send = (m: NodeMessage): boolean => {
      queue = queue.then(() => handler.handle(node, m, (reply: ControlMessage) => {
        setImmediate(() => channel.onMessage(reply));
        return true;
      }));
      return true;
    };
    let live = 0;
    let liveRunning = true;
    const liveLoop = (async () => {
      while (liveRunning) {
        await new Promise((resolve) => setTimeout(resolve, 10));
        await Promise.all(Array.from({ length: 10 * LIVE_PER_MS }, () => store.finalise(sampleRecord(`live-${live++}`))));
      }
    })();
    const started = performance.now();
    channel.onEstablished(send);
    const target = BACKFILL_RECORDS;
    while (channel.totals.recordsAcknowledged < target) await new Promise((resolve) => setTimeout(resolve, 20));
    const ms = performance.now() - started;
    liveRunning = false;
    await liveLoop;
    channel.stop();
    await queue;
    await store.close();
    return { perSec: (channel.totals.recordsAcknowledged / ms) * 1000, live, ms };
  } finally {
    await pool.end();
    await pgdb.stop();
    cleanup();
  }
}

const fmt = (n: number, digits = 0): string => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

const rows: string[][] = [];
for (const sync of ['normal', 'full'] as const) {
  const r = await spoolWrites(sync);
  rows.push([`spool finalise, synchronous=${sync.toUpperCase()} (group commit, ${CONCURRENCY} per tick)`, fmt(r.perSec), fmt(r.usPer, 1), `${r.commits} commits`]);
}
for (const sync of ['NORMAL', 'FULL'] as const) {
  const one = bareInserts(sync, 1);
  rows.push([`bare better-sqlite3 insert, synchronous=${sync}, 1 row/transaction`, fmt(one.perSec), fmt(one.usPer, 1), '']);
  const batched = bareInserts(sync, CONCURRENCY);
  rows.push([`bare better-sqlite3 insert, synchronous=${sync}, ${CONCURRENCY} rows/transaction`, fmt(batched.perSec), fmt(batched.usPer, 1), '']);
}
const bf = await backfillIntoPostgres();
rows.push([`backfill into PostgreSQL (${BACKFILL_RECORDS} records, while spooling live traffic)`, fmt(bf.perSec), fmt((bf.ms * 1000) / BACKFILL_RECORDS, 1), `${bf.live} live records spooled meanwhile`]);

const header = ['what', 'records/s', 'µs/record', 'note'];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
const line = (cells: string[]): string => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
console.log(`spool bench: ${RECORDS} records of ~${Buffer.byteLength(JSON.stringify(sampleRecord('x')))} bytes, node ${process.version}, ${os.cpus().length} CPUs`);
console.log(line(header));
console.log(`|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
for (const r of rows) console.log(line(r));
