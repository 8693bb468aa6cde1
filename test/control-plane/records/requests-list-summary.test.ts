// The records list reads only what its summaries show, and shows exactly what it showed when it read records whole.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { ingestRecords } from '../../../control-plane/src/records/record-ingestion.js';
import { getRecord, listRecords, listRecordsQuery } from '../../../control-plane/src/records/record-queries.js';
import { requestSummarySchema, toRequestSummary } from '../../../control-plane/src/records/record-view.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { configApp } from '../config-harness.js';
import { migratedPool } from '../nodes-harness.js';
import { record } from '../../edge-node/spool/spool-helpers.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call } = await configApp(t, db.url);

const A = { nodeId: 'node-spool-test-0001', nodeName: 'edge-a' };
const base = Date.UTC(2026, 10, 1, 8, 0, 0);

// Every field set, and each part a summary leaves out as large as a record may have it.
const full = record('summary-full', {
  receivedAt: base,
  finishedAt: base + 1234,
  clientRequestId: 'trace-é-1',
  api: 'messages',
  status: 'failed',
  httpStatus: 502,
  errorCode: 'ZN_ERR_UPSTREAM_ERROR',
  usage: { inputTokens: 123_456, outputTokens: 7, estimated: true },
  cost: { reservedMicros: 9_000, costMicros: 8_765, leaseId: 'lease-9', priced: true },
  timings: { totalMs: 1234.567, upstreamFirstByteMs: 0.25, upstreamMs: 1200.5, stagesUs: { identify: 12, route: 3.5 } },
  attempts: Array.from({ length: 64 }, (_, i) => ({ upstream: `up-${i}`, model: 'm'.repeat(256), outcome: 'status' as const, httpStatus: 503, durationMs: i + 0.5 })),
  guardrails: Array.from({ length: 400 }, (_, i) => ({ policyId: `pol-${i}`, rule: i, detector: 'email', action: 'flag' as const, on: 'output' as const, matches: i })),
  // Random, so PostgreSQL cannot compress it: the record is stored out of line at its full size.
  bodies: { request: randomBytes(600_000).toString('base64'), response: 'y'.repeat(100_000), truncated: true },
});
// The other shape a summary takes: nulls, and no caller id.
const sparse = record('summary-sparse', { receivedAt: base + 1, finishedAt: base + 1, keyId: null, accountId: null, model: null, upstream: null, upstreamModel: null, bodies: null });
await ingestRecords(pool, A, [full, sparse]);

const window = { from: base, to: base + 2 };

t.test('a list page fetches only the fields its summaries show, not bodies, attempts or guardrail verdicts', async (t) => {
  const { rows } = await listRecords(pool, { ...window, limit: 10 });
  const listed = rows.find((row) => row.record.requestId === full.requestId);
  t.ok(listed, 'the record is listed');
  t.same(Object.keys(listed!.record).sort(), [
    'accountId', 'api', 'clientRequestId', 'cost', 'errorCode', 'finishedAt', 'httpStatus', 'keyId', 'model', 'receivedAt', 'requestId', 'status', 'timings', 'usage',
  ]);
  t.same(listed!.record.cost, { costMicros: 8_765 });
  t.same(listed!.record.timings, { totalMs: 1234.567 });
  // The whole record is nearly 1 MB; what a page fetches of it is the size of its summary.
  t.ok(JSON.stringify(listed).length < 1_000, `fetched ${JSON.stringify(listed).length} characters of a ${JSON.stringify(full).length}-character record`);
});

t.test('a listed summary is byte for byte the summary of the whole record', async (t) => {
  const summaries = await Promise.all([full, sparse].map(async (r: RequestRecord) => requestSummarySchema.parse(toRequestSummary((await getRecord(pool, r.requestId))!))));
  const res = await call('GET', `/api/v1/requests?from=${window.from}&to=${window.to}`);
  t.equal(res.statusCode, 200);
  t.equal(res.body, JSON.stringify({ requests: summaries.reverse(), nextCursor: null }));
});

t.test('a list page reads each stored record once, however many summary fields it takes from it', async (t) => {
  // Buffer counts, not time: taking each field with `record -> 'field'` fetched the record from
  // TOAST once per field, a dozen times over.
  const blocksRead = async (query: { text: string; values: unknown[] }): Promise<number> => {
    const { rows } = await pool.query<{ 'QUERY PLAN': Array<{ Plan: Record<string, number> }> }>({ text: `explain (analyze, buffers, format json) ${query.text}`, values: query.values });
    const plan = rows[0]!['QUERY PLAN'][0]!.Plan;
    return plan['Shared Hit Blocks']! + plan['Shared Read Blocks']!;
  };
  const once = await blocksRead({
    text: 'select length(record::text) from request_records where received_at = to_timestamp($1::bigint / 1000.0) and request_id = $2',
    values: [full.receivedAt, full.requestId],
  });
  const listed = await blocksRead(listRecordsQuery({ from: full.receivedAt, to: full.receivedAt + 1, limit: 10 }));
  t.ok(listed < 2 * once, `the page read ${listed} blocks; reading the record whole once takes ${once}`);
});
