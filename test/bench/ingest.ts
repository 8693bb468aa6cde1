/**
 * `npm run bench:ingest` (not a test): what the control plane and PostgreSQL spend per request
 * record when a node's RecordBatch is ingested, next to the previous way of sending the rows
 * (one array parameter per column, the record as jsonb[]) in the same run. Both include the
 * batch's parsing and validation (parseRecordBatch) and the request_record_ids insert; only the
 * request_records INSERT differs. Prints a table (copied into docs/performance.md), and a second
 * one: validating a parsed record with the schema (zod) against the hand-written check
 * (isPlainValidRecord) that parseRecordBatch tries first.
 *
 * CPU is measured on both sides: the bench process (process.cpuUsage) and the PostgreSQL backend
 * serving its one connection (/proc/<pid>/stat). Variants alternate, BENCH_ROUNDS times each.
 * Knobs: BENCH_BATCH (records per batch, default 200), BENCH_BATCHES (per round, default 40),
 * BENCH_ROUNDS (default 3).
 */
import pg from 'pg';
import { isPlainValidRecord, requestRecordSchema } from '../../proto/src/index.js';
import type { NodeMessage, RequestRecord } from '../../proto/src/index.js';
import { migrate } from '../../control-plane/src/db/migrate.js';
import { parseRecordBatch } from '../../control-plane/src/records/record-batch-handler.js';
import { ingestRecords } from '../../control-plane/src/records/record-ingestion.js';
import { ensurePartitions, rememberPartitions } from '../../control-plane/src/records/record-partitions.js';
import { withTransaction } from '../../control-plane/src/nodes/with-transaction.js';
import { startPostgres } from '../fixtures/postgres.js';
import { cpuSecondsOf } from './gateway-cpu.js';
import { record } from '../edge-node/spool/spool-helpers.js';

const BATCH = Number(process.env.BENCH_BATCH ?? 200);
const BATCHES = Number(process.env.BENCH_BATCHES ?? 40);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const NODE = { nodeId: 'bench-node', nodeName: 'bench-node' };

/** The request_records INSERT as it was before: one array parameter per column. */
async function ingestWithColumnArrays(pool: pg.Pool, records: readonly RequestRecord[]): Promise<void> {
  await withTransaction(pool, async (client) => {
    rememberPartitions(await ensurePartitions(client, records.map((r) => r.receivedAt)));
    const ids = await client.query<{ request_id: string }>(
      `insert into request_record_ids (request_id, received_at, node_id)
       select id, to_timestamp(ms / 1000.0), $3 from unnest($1::text[], $2::bigint[]) as r(id, ms)
       on conflict (request_id) do nothing returning request_id`,
      [records.map((r) => r.requestId), records.map((r) => r.receivedAt), NODE.nodeId],
    );
    const fresh = new Set(ids.rows.map((r) => r.request_id));
    const rows = records.filter((r) => fresh.has(r.requestId));
    await client.query(
      `insert into request_records (request_id, received_at, finished_at, node_id, node_name, key_id, account_id, model, api,
                                    status, http_status, error_code, input_tokens, output_tokens, cost_micros, record)
       select r.request_id, to_timestamp(r.received_ms / 1000.0), to_timestamp(r.finished_ms / 1000.0), $1, $2, r.key_id,
              r.account_id, r.model, r.api, r.status, r.http_status, r.error_code, r.input_tokens, r.output_tokens, r.cost_micros, r.record
       from unnest($3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
                   $11::int[], $12::text[], $13::bigint[], $14::bigint[], $15::bigint[], $16::jsonb[])
         as r(request_id, received_ms, finished_ms, key_id, account_id, model, api, status, http_status, error_code,
              input_tokens, output_tokens, cost_micros, record)`,
      [
        NODE.nodeId, NODE.nodeName, rows.map((r) => r.requestId), rows.map((r) => r.receivedAt), rows.map((r) => r.finishedAt),
        rows.map((r) => r.keyId), rows.map((r) => r.accountId), rows.map((r) => r.model), rows.map((r) => r.api), rows.map((r) => r.status),
        rows.map((r) => r.httpStatus), rows.map((r) => r.errorCode), rows.map((r) => r.usage.inputTokens), rows.map((r) => r.usage.outputTokens),
        rows.map((r) => r.cost.costMicros), rows.map((r) => JSON.stringify(r)),
      ],
    );
  });
}

let seq = 0;
/** A RecordBatch as a node sends it: records like the bench node's (no bodies, no price). */
function nextBatch(): NodeMessage {
  const now = Date.now();
  const records = Array.from({ length: BATCH }, () => {
    seq += 1;
    return record(`req_bench_${seq.toString().padStart(16, '0')}`, {
      nodeId: NODE.nodeId, receivedAt: now - 3, finishedAt: now, keyId: 'c2461c99-0a32-43d0-b970-07663530901a', accountId: '6d500b27-3456-414b-81ea-930b71b40414',
      cost: { reservedMicros: 0, costMicros: 0, leaseId: null, priced: false }, bodies: null,
      timings: { totalMs: 3, upstreamFirstByteMs: 1, upstreamMs: 2, stagesUs: { identify: 9, authenticate: 13, 'rate-limit': 16, 'guardrails-in': 7, forward: 2100, 'guardrails-out': 7 } },
    });
  });
  return { recordBatch: { batchId: `b-${seq}`, records: records.map((r) => ({ requestId: r.requestId, recordJson: Buffer.from(JSON.stringify(r)) })), firstSequence: 1n, lastSequence: BigInt(records.length) } };
}

const db = await startPostgres();
const pool = new pg.Pool({ connectionString: db.url, max: 1 });
try {
  await migrate(pool);
  const backendPid = (await pool.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
  const backendCpuUs = (): number => {
    const seconds = cpuSecondsOf(backendPid);
    if (seconds === undefined) throw new Error(`cannot read the CPU time of PostgreSQL backend ${backendPid} from /proc`);
    return seconds * 1e6;
  };
  const variants = {
    'column arrays (before)': (records: RequestRecord[]) => ingestWithColumnArrays(pool, records),
    'one JSON array (ingestRecords)': async (records: RequestRecord[]) => {
      await ingestRecords(pool, NODE, records);
    },
  };
  const totals = new Map<string, { client: number; pg: number; wall: number; records: number }>();
  // A warm-up batch of each, not counted (JIT, partitions, plan caches).
  for (const run of Object.values(variants)) await run(parseRecordBatch(nextBatch(), NODE.nodeId).records);
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? Object.entries(variants) : Object.entries(variants).reverse();
    for (const [name, run] of order) {
      const batches = Array.from({ length: BATCHES }, nextBatch);
      const cpu0 = process.cpuUsage();
      const pg0 = backendCpuUs();
      const t0 = performance.now();
      for (const batch of batches) await run(parseRecordBatch(batch, NODE.nodeId).records);
      const cpu = process.cpuUsage(cpu0);
      const sum = totals.get(name) ?? { client: 0, pg: 0, wall: 0, records: 0 };
      sum.client += cpu.user + cpu.system;
      sum.pg += backendCpuUs() - pg0;
      sum.wall += (performance.now() - t0) * 1000;
      sum.records += BATCH * BATCHES;
      totals.set(name, sum);
    }
  }
  const base = totals.get('column arrays (before)')!;
  console.log(`\n${BATCH} records per batch, ${BATCHES} batches per round, ${ROUNDS} rounds per variant (alternating)\n`);
  console.log('| variant | control plane CPU µs/record | PostgreSQL CPU µs/record | wall µs/record | CP CPU ÷ before | PG CPU ÷ before | wall ÷ before |');
  console.log('|---|---:|---:|---:|---:|---:|---:|');
  for (const [name, s] of totals) {
    const per = (v: number): number => v / s.records;
    console.log(`| ${name} | ${per(s.client).toFixed(1)} | ${per(s.pg).toFixed(1)} | ${per(s.wall).toFixed(1)} | ${(s.client / base.client).toFixed(2)} | ${(s.pg / base.pg).toFixed(2)} | ${(s.wall / base.wall).toFixed(2)} |`);
  }
  // Validation alone, per record, on the same parsed JSON: the schema (zod) against the hand-written
  // check parseRecordBatch now tries first (proto/src/request-record-fast-check.ts).
  const parsedJson = Array.from({ length: 20 }, nextBatch).flatMap((m) => m.recordBatch!.records.map((r) => JSON.parse(Buffer.from(r.recordJson).toString('utf8')) as unknown));
  const checks = { 'requestRecordSchema.safeParse (zod)': (v: unknown) => requestRecordSchema.safeParse(v).success, 'isPlainValidRecord': (v: unknown) => isPlainValidRecord(v) };
  const checkTotals = new Map<string, { us: number; n: number }>();
  for (let round = 0; round < ROUNDS * 2; round++) {
    for (const [name, check] of round % 2 === 0 ? Object.entries(checks) : Object.entries(checks).reverse()) {
      const cpu0 = process.cpuUsage();
      let ok = 0;
      for (let i = 0; i < 5; i++) for (const v of parsedJson) if (check(v)) ok += 1;
      const cpu = process.cpuUsage(cpu0);
      if (ok !== parsedJson.length * 5) throw new Error(`${name} refused a record the bench built`);
      const sum = checkTotals.get(name) ?? { us: 0, n: 0 };
      sum.us += cpu.user + cpu.system;
      sum.n += parsedJson.length * 5;
      checkTotals.set(name, sum);
    }
  }
  const zodPer = checkTotals.get('requestRecordSchema.safeParse (zod)')!;
  console.log('\n| validation of one parsed record | CPU µs/record | ÷ zod |');
  console.log('|---|---:|---:|');
  for (const [name, s] of checkTotals) console.log(`| ${name} | ${(s.us / s.n).toFixed(2)} | ${((s.us / s.n) / (zodPer.us / zodPer.n)).toFixed(2)} |`);
} finally {
  // pg-pool's end() can resolve before its last client's socket has closed; the server's shutdown
  // then reaches that client as a FATAL error, which must not crash the bench after its table.
  pool.on('error', () => undefined);
  await pool.end();
  await db.stop();
}
