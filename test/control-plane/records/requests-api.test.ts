// GET /api/v1/requests/{requestId} and the filtered, keyset-paginated list of ingested records.
import t from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { parseRecordBatch } from '../../../control-plane/src/records/record-batch-handler.js';
import { ingestRecords } from '../../../control-plane/src/records/record-ingestion.js';
import { listRecordsQuery } from '../../../control-plane/src/records/record-queries.js';
import type { RecordFilter } from '../../../control-plane/src/records/record-queries.js';
import { indexOnlyPlan } from '../../fixtures/index-plan.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { configApp } from '../config-harness.js';
import { migratedPool, validNodeBody } from '../nodes-harness.js';
import { record } from '../../edge-node/spool/spool-helpers.js';
import { insertAccount } from '../billing/billing-fixtures.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call } = await configApp(t, db.url);

// Real nodes: the list's node filter names a node by its name or id.
const createNode = async (name: string): Promise<{ nodeId: string; nodeName: string }> => {
  const res = await call('POST', '/api/v1/nodes', validNodeBody({ name }));
  if (res.statusCode !== 201) throw new Error(`node ${name}: ${res.statusCode} ${res.body.slice(0, 200)}`);
  return { nodeId: res.json<{ node: { id: string } }>().node.id, nodeName: name };
};
const A = await createNode('edge-a');
const B = await createNode('edge-b');
const base = Date.UTC(2026, 10, 1, 8, 0, 0);
const at = (i: number): Partial<RequestRecord> => ({ receivedAt: base + i * 1000, finishedAt: base + i * 1000 + 20 });

const aRecords: RequestRecord[] = Array.from({ length: 12 }, (_, i) =>
  record(`api-a-${String(i).padStart(2, '0')}`, { ...at(i), nodeId: A.nodeId, model: i % 2 === 0 ? 'echo' : 'gpt', status: i % 3 === 0 ? 'failed' : 'ok', httpStatus: i % 3 === 0 ? 502 : 200, errorCode: i % 3 === 0 ? 'ZN_ERR_UPSTREAM_ERROR' : null }),
);
const bRecords: RequestRecord[] = Array.from({ length: 3 }, (_, i) => record(`api-b-${i}`, { ...at(100 + i), nodeId: B.nodeId, keyId: 'key-b', clientRequestId: 'trace-shared' }));
await ingestRecords(pool, A, aRecords);
await ingestRecords(pool, B, bRecords);

// One record with everything the detail view shows.
await ingestRecords(pool, A, [
  record('api-detail', {
    ...at(200),
    nodeId: A.nodeId,
    guardrails: [{ policyId: 'pol-1', rule: 0, detector: 'email', action: 'mask', on: 'input', matches: 2 }],
    attempts: [
      { upstream: 'demo', model: 'demo-echo', outcome: 'status', httpStatus: 503, durationMs: 12 },
      { upstream: 'backup', model: 'demo-echo', outcome: 'ok', httpStatus: 200, durationMs: 30 },
    ],
  }),
]);

interface ListBody { requests: Array<{ requestId: string; node: { id: string; name: string }; status: string; model: string }>; nextCursor: string | null }
const list = async (query: string): Promise<ListBody> => {
  const res = await call('GET', `/api/v1/requests${query}`);
  t.equal(res.statusCode, 200, `GET /api/v1/requests${query}: ${res.body.slice(0, 200)}`);
  return res.json<ListBody>();
};

t.test('one request by id shows node, key, model, status, tokens, cost, timings, verdicts and attempts', async (t) => {
  const res = await call('GET', '/api/v1/requests/api-detail');
  t.equal(res.statusCode, 200);
  t.match(res.json(), {
    request: {
      requestId: 'api-detail',
      node: { id: A.nodeId, name: 'edge-a' },
      keyId: 'key-1',
      model: 'echo',
      status: 'ok',
      usage: { inputTokens: 10, outputTokens: 20 },
      costMicros: 900,
      cost: { reservedMicros: 1500, costMicros: 900, leaseId: 'lease-1', priced: true },
      timings: { totalMs: 50, upstreamFirstByteMs: 10, stagesUs: { identify: 12 } },
      guardrails: [{ detector: 'email', action: 'mask', matches: 2 }],
      attempts: [{ upstream: 'demo', outcome: 'status', httpStatus: 503 }, { upstream: 'backup', outcome: 'ok' }],
      receivedAt: new Date(base + 200_000).toISOString(),
    },
  });
});

t.test('an unknown request id is a 404 that says records arrive by backfill', async (t) => {
  const res = await call('GET', '/api/v1/requests/never-seen');
  t.equal(res.statusCode, 404);
  t.match(res.json(), { error: { code: 'ZN_ERR_CP_NOT_FOUND', message: /delivered/ } });
});

t.test('the list is newest first and filters by node, key, model, status and time range', async (t) => {
  const all = await list('?limit=500');
  t.equal(all.requests[0]?.requestId, 'api-detail', 'newest first');
  t.same((await list('?node=edge-b')).requests.map((r) => r.requestId), ['api-b-2', 'api-b-1', 'api-b-0']);
  t.same((await list('?keyId=key-b')).requests.length, 3);
  const failed = await list('?node=edge-a&status=failed');
  t.same(failed.requests.map((r) => r.requestId), ['api-a-09', 'api-a-06', 'api-a-03', 'api-a-00']);
  const gpt = await list('?node=edge-a&model=gpt&status=ok');
  t.same(gpt.requests.map((r) => r.requestId), ['api-a-11', 'api-a-07', 'api-a-05', 'api-a-01']);
  const range = await list(`?from=${base + 2000}&to=${new Date(base + 5000).toISOString()}`);
  t.same(range.requests.map((r) => r.requestId), ['api-a-04', 'api-a-03', 'api-a-02'], 'from inclusive, to exclusive');
});

t.test("a node filter names the live node of that name, or any node by id: a reused name never mixes in the deleted node's records", async (t) => {
  const day = Date.UTC(2026, 10, 1); // before the other records: the newest-first checks keep theirs
  const first = await createNode('edge-reused');
  await ingestRecords(pool, first, [record('reused-old', { nodeId: first.nodeId, receivedAt: day, finishedAt: day + 5 })]);
  t.equal((await call('DELETE', '/api/v1/nodes/edge-reused')).statusCode, 200);
  const second = await createNode('edge-reused');
  await ingestRecords(pool, second, [record('reused-new', { nodeId: second.nodeId, receivedAt: day + 1000, finishedAt: day + 1005 })]);
  const listed = async (node: string): Promise<Array<{ requestId: string; nodeId: string }>> =>
    (await list(`?node=${node}`)).requests.map((r) => ({ requestId: r.requestId, nodeId: r.node.id }));
  t.same(await listed('edge-reused'), [{ requestId: 'reused-new', nodeId: second.nodeId }], 'the name is the live node');
  t.same(await listed(second.nodeId), [{ requestId: 'reused-new', nodeId: second.nodeId }], 'the live node by id');
  t.same(await listed(first.nodeId.toUpperCase()), [{ requestId: 'reused-old', nodeId: first.nodeId }], 'the deleted node by id, in either case');
  for (const unknown of ['no-such-node', '00000000-0000-4000-8000-000000000000']) {
    const res = await call('GET', `/api/v1/requests?node=${unknown}`);
    t.equal(res.statusCode, 404, unknown);
    t.match(res.json(), { error: { code: 'ZN_ERR_CP_NODE_NOT_FOUND', message: `No node named or with id '${unknown}'` } }, unknown);
  }
});

t.test('pages follow the cursor without gaps or repeats', async (t) => {
  const seen: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const page: ListBody = await list(`?node=edge-a&limit=5${cursor !== null ? `&cursor=${cursor}` : ''}`);
    seen.push(...page.requests.map((r) => r.requestId));
    cursor = page.nextCursor;
    pages += 1;
  } while (cursor !== null && pages < 10);
  t.equal(pages, 3);
  t.same(seen, ['api-detail', ...aRecords.map((r) => r.requestId).reverse()]);
});

t.test('bad query parameters are refused with a 400', async (t) => {
  for (const q of ['?limit=0', '?limit=501', '?status=great', '?cursor=not-a-cursor', '?from=yesterday', '?color=red']) {
    const res = await call('GET', `/api/v1/requests${q}`);
    t.equal(res.statusCode, 400, q);
  }
});

t.test('a window whose from is not before its to is refused naming from, not answered with an empty list', async (t) => {
  for (const q of [`?from=${base + 5000}&to=${base + 2000}`, '?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z', `?from=${base}&to=${base}`]) {
    const res = await call('GET', `/api/v1/requests${q}`);
    t.equal(res.statusCode, 400, q);
    t.same(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', param: 'from', message: "query field 'from': must be before 'to' (from is inclusive, to exclusive)" } }, q);
  }
  t.equal((await list(`?from=${base}&to=${base + 1}`)).requests.length, 1, 'a window of one millisecond holds its record');
});

t.test('an ISO bound finer than a millisecond is refused naming the rule, not cut to its millisecond', async (t) => {
  // api-a-00 was received at base (…T08:00:00.000Z): cut to the millisecond, `to` = base + 0.5 ms
  // left it out, and a window 0.8 ms wide was refused as backwards.
  const rule = 'must have at most 3 fractional digits (such as 2026-03-07T00:00:00.123Z): times are kept to the millisecond';
  for (const [q, field] of [
    ['?to=2026-11-01T08:00:00.0005Z', 'to'],
    ['?from=2026-11-01T08:00:00.0001Z', 'from'],
    ['?from=2026-11-01T08:00:00.000000001%2B01:00', 'from'],
  ] as const) {
    const res = await call('GET', `/api/v1/requests${q}`);
    t.equal(res.statusCode, 400, q);
    t.same(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', param: field, message: `query field '${field}': ${rule}` } }, q);
  }
  const narrow = await call('GET', '/api/v1/requests?from=2026-11-01T08:00:00.0001Z&to=2026-11-01T08:00:00.0009Z');
  t.equal(narrow.statusCode, 400);
  t.notMatch(narrow.json<{ error: { message: string } }>().error.message, /must be before/, 'not refused as a backwards window');
  t.same((await list('?node=edge-a&to=2026-11-01T08:00:00.001Z')).requests.map((r) => r.requestId), ['api-a-00'], 'milliseconds are taken as they are');
});

t.test('a record set aside by ingestion answers by id with a 404 naming its node, reason and detail, never its content', async (t) => {
  const secret = 'sk-set-aside-never-shown';
  const bad = { ...record('api-set-aside', { nodeId: A.nodeId, model: secret, ...at(-50) }), httpStatus: 700 };
  const batch = parseRecordBatch({ recordBatch: { batchId: 'set-aside-1', records: [{ requestId: bad.requestId, recordJson: Buffer.from(JSON.stringify(bad)) }], firstSequence: 1n, lastSequence: 1n } }, A.nodeId);
  t.match(await ingestRecords(pool, A, batch.records, { batchId: batch.batchId, rejected: batch.rejected }), { accepted: 0, rejected: 1 });
  const res = await call('GET', '/api/v1/requests/api-set-aside');
  t.equal(res.statusCode, 404);
  const { error } = res.json<{ error: { code: string; message: string } }>();
  t.equal(error.code, 'ZN_ERR_CP_NOT_FOUND');
  t.match(error.message, `arrived from node 'edge-a' (${A.nodeId})`);
  t.match(error.message, 'was set aside, not ingested');
  t.match(error.message, 'invalid_record (not a request record (httpStatus: ');
  t.match(error.message, 'rejected_request_records');
  t.notMatch(error.message, /delivered|\(yet\)/, 'not told to wait for a record that will never come');
  t.notMatch(res.body, secret);
  t.notOk((await list('?node=edge-a&limit=500')).requests.some((r) => r.requestId === 'api-set-aside'), 'and it is not listed');
});

t.test('a request across a bound is listed by when it was received and charged by when it finished', async (t) => {
  // What docs/api.md says about reconciling /requests with /spend: the two window on different instants.
  const node = await createNode('edge-straddle');
  const accountId = await insertAccount(pool, 'straddle-acct');
  const nov1 = Date.UTC(2026, 10, 1);
  await ingestRecords(pool, node, [record('api-straddle', {
    nodeId: node.nodeId, accountId, receivedAt: nov1 - 10, finishedAt: nov1 + 20, cost: { reservedMicros: 0, costMicros: 500, leaseId: null, priced: true },
  })]);
  const october = 'from=2026-10-01T00:00:00Z&to=2026-11-01T00:00:00Z';
  const november = 'from=2026-11-01T00:00:00Z&to=2026-12-01T00:00:00Z';
  t.same((await list(`?node=edge-straddle&${october}`)).requests.map((r) => r.requestId), ['api-straddle'], 'listed in October');
  t.same((await list(`?node=edge-straddle&${november}`)).requests, [], 'not in November');
  const spend = async (window: string): Promise<unknown[]> =>
    (await call('GET', `/api/v1/spend?by=account&${window}`)).json<{ rows: Array<{ id: string }> }>().rows.filter((r) => r.id === accountId);
  t.same(await spend(october), [], 'not charged in October');
  t.match(await spend(november), [{ id: accountId, requests: 1, spentMicros: 500 }], 'charged in November');
});

t.test("a caller's own id finds every request sent with it, each under its own request id", async (t) => {
  const body = await list('?clientRequestId=trace-shared');
  t.same(body.requests.map((r) => r.requestId), ['api-b-2', 'api-b-1', 'api-b-0']);
  t.same(body.requests.map((r) => (r as { clientRequestId?: string | null }).clientRequestId), ['trace-shared', 'trace-shared', 'trace-shared']);
  t.same((await list('?clientRequestId=nobody')).requests, []);
  const detail = (await call('GET', '/api/v1/requests/api-a-00')).json<{ request: { clientRequestId: string | null } }>();
  t.equal(detail.request.clientRequestId, null, 'null when the caller sent none');
});

t.test('the API needs admin auth', async (t) => {
  const { app } = await configApp(t, db.url);
  const res = await app.inject({ method: 'GET', url: '/api/v1/requests' });
  t.equal(res.statusCode, 401);
});

t.test('every list filter reads an index on its own column in received_at order, without sorting the records whole', async (t) => {
  const plan = (filter: Omit<RecordFilter, 'limit'>): Promise<string> => indexOnlyPlan(pool, listRecordsQuery({ ...filter, limit: 50 }));
  const unfiltered = await plan({});
  t.match(unfiltered, /Index Scan Backward using request_records_p\d+_pkey/, 'newest first from the primary key');
  t.notMatch(unfiltered, /Sort/);
  for (const [filter, column] of [
    [{ node: { id: B.nodeId, name: 'edge-b' } }, 'node_name'],
    [{ keyId: 'key-b' }, 'key_id'],
    [{ model: 'gpt' }, 'model'],
    [{ status: 'failed' }, 'status'],
    [{ clientRequestId: 'trace-shared' }, "\\(record ->> 'clientRequestId'::text\\)"],
  ] as const) {
    const text = await plan(filter);
    t.match(text, new RegExp(`Index Cond: \\(${column} = `), `${column}: ${text}`);
    // An incremental sort only orders the rows that share a received_at (the index's second column).
    t.notMatch(text, /(?<!Incremental )Sort {2}\(|Seq Scan/, column);
  }
  // The node filter's id keeps out another node of the same name among the name's index entries.
  t.match(await plan({ node: { id: B.nodeId, name: 'edge-b' } }), /Filter: \(node_id = /, 'node_id filtered');
});
