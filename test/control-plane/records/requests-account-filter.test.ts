// GET /api/v1/requests?account=: one account's records (by its name or id, as /leases?account=),
// with the other filters and through keyset pages, so its spend can be reconciled with them.
import t from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { ingestRecords } from '../../../control-plane/src/records/record-ingestion.js';
import { listRecordsQuery } from '../../../control-plane/src/records/record-queries.js';
import { indexOnlyPlan } from '../../fixtures/index-plan.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { configApp } from '../config-harness.js';
import { migratedPool, validNodeBody } from '../nodes-harness.js';
import { record } from '../../edge-node/spool/spool-helpers.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call } = await configApp(t, db.url);

const createNode = async (name: string): Promise<{ nodeId: string; nodeName: string }> => {
  const res = await call('POST', '/api/v1/nodes', validNodeBody({ name }));
  if (res.statusCode !== 201) throw new Error(`node ${name}: ${res.statusCode} ${res.body.slice(0, 200)}`);
  return { nodeId: res.json<{ node: { id: string } }>().node.id, nodeName: name };
};
const createAccount = async (name: string): Promise<string> => {
  const res = await call('POST', '/api/v1/accounts', { name });
  if (res.statusCode !== 201) throw new Error(`account ${name}: ${res.statusCode} ${res.body.slice(0, 200)}`);
  return res.json<{ account: { id: string } }>().account.id;
};

const N1 = await createNode('edge-one');
const N2 = await createNode('edge-two');
const acme = await createAccount('acme');
const globex = await createAccount('globex');
const base = Date.UTC(2026, 10, 1, 8, 0, 0);

// The two accounts' records interleaved in time, over two nodes. Pairs of acme's records share a
// receivedAt, so pages end between records of one instant and only the request id orders them.
const charged = { reservedMicros: 0, costMicros: 100, leaseId: null, priced: true };
const acmeRecords: RequestRecord[] = Array.from({ length: 9 }, (_, i) => record(`acme-${i}`, {
  nodeId: (i % 2 === 0 ? N1 : N2).nodeId, accountId: acme, keyId: 'key-acme',
  receivedAt: base + Math.floor(i / 2) * 1000, finishedAt: base + Math.floor(i / 2) * 1000 + 20,
  status: i % 3 === 0 ? 'failed' : 'ok', cost: charged,
}));
const globexRecords: RequestRecord[] = Array.from({ length: 6 }, (_, i) => record(`globex-${i}`, {
  nodeId: (i % 2 === 0 ? N1 : N2).nodeId, accountId: globex, keyId: 'key-globex',
  receivedAt: base + i * 1000 + 500, finishedAt: base + i * 1000 + 520, cost: charged,
}));
// A refusal without a valid key: a record of no account.
const keyless = record('keyless-0', { nodeId: N1.nodeId, accountId: null, keyId: null, receivedAt: base + 1500, finishedAt: base + 1501, status: 'rejected', httpStatus: 401, cost: { ...charged, costMicros: 0 } });
const byNode = (node: { nodeId: string }): RequestRecord[] => [...acmeRecords, ...globexRecords, keyless].filter((r) => r.nodeId === node.nodeId);
await ingestRecords(pool, N1, byNode(N1));
await ingestRecords(pool, N2, byNode(N2));

/** Newest first, as the list orders them: receivedAt, then request id, both descending. */
const newestFirst = (records: RequestRecord[]): string[] =>
  [...records].sort((a, b) => b.receivedAt - a.receivedAt || (a.requestId < b.requestId ? 1 : -1)).map((r) => r.requestId);

interface ListBody { requests: Array<{ requestId: string; accountId: string | null }>; nextCursor: string | null }
const list = async (query: string): Promise<ListBody> => {
  const res = await call('GET', `/api/v1/requests${query}`);
  t.equal(res.statusCode, 200, `GET /api/v1/requests${query}: ${res.body.slice(0, 200)}`);
  return res.json<ListBody>();
};

t.test("an account filter lists that account's records only, named by its name or its id", async (t) => {
  t.equal((await list('?limit=500')).requests.length, acmeRecords.length + globexRecords.length + 1, 'unfiltered: every record');
  for (const account of ['acme', acme, acme.toUpperCase()]) {
    const body = await list(`?account=${account}&limit=500`);
    t.same(body.requests.map((r) => r.requestId), newestFirst(acmeRecords), account);
    t.ok(body.requests.every((r) => r.accountId === acme), `${account}: every record is acme's`);
    t.equal(body.nextCursor, null);
  }
  t.same((await list(`?account=${globex}`)).requests.map((r) => r.requestId), newestFirst(globexRecords));
});

t.test('an account with no records lists none', async (t) => {
  await createAccount('initech');
  t.same(await list('?account=initech'), { requests: [], nextCursor: null });
});

t.test("paging through one account's records returns each of them once, in order, and none of another account's", async (t) => {
  for (const limit of [1, 2, 3, 4]) {
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    // Bounded: a cursor that never advanced would otherwise page for ever.
    do {
      const page: ListBody = await list(`?account=acme&limit=${limit}${cursor !== null ? `&cursor=${cursor}` : ''}`);
      t.ok(page.requests.length <= limit, `limit ${limit}: page ${pages + 1} holds at most ${limit}`);
      seen.push(...page.requests.map((r) => r.requestId));
      cursor = page.nextCursor;
      pages += 1;
    } while (cursor !== null && pages <= acmeRecords.length);
    t.same(seen, newestFirst(acmeRecords), `limit ${limit}: each record once, newest first`);
    t.equal(pages, Math.ceil(acmeRecords.length / limit), `limit ${limit}: no empty page at the end`);
  }
});

t.test('the account filter combines with the other filters', async (t) => {
  const ids = async (query: string): Promise<string[]> => (await list(query)).requests.map((r) => r.requestId);
  t.same(await ids('?account=acme&status=failed'), newestFirst(acmeRecords.filter((r) => r.status === 'failed')), 'status');
  t.same(await ids('?account=acme&node=edge-two'), newestFirst(acmeRecords.filter((r) => r.nodeId === N2.nodeId)), 'node');
  t.same(await ids(`?account=acme&from=${base + 1000}&to=${base + 3000}`),
    newestFirst(acmeRecords.filter((r) => r.receivedAt >= base + 1000 && r.receivedAt < base + 3000)), 'window');
  t.same(await ids('?account=acme&keyId=key-globex'), [], "another account's key: nothing");
  // Paged with a filter besides: the cursor keeps to the filtered list.
  const seen: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const page: ListBody = await list(`?account=globex&node=edge-one&limit=1${cursor !== null ? `&cursor=${cursor}` : ''}`);
    seen.push(...page.requests.map((r) => r.requestId));
    cursor = page.nextCursor;
    pages += 1;
  } while (cursor !== null && pages <= globexRecords.length);
  t.same(seen, newestFirst(globexRecords.filter((r) => r.nodeId === N1.nodeId)), 'account and node, paged');
});

t.test('an account filter no account could have is a 400 naming the field and its rule', async (t) => {
  for (const [value, rule] of [
    ['acme%20corp', 'must be 1 to 128 characters of letters, digits and . _ : / -'],
    ['', 'must be 1 to 128 characters of letters, digits and . _ : / -'],
    ['a'.repeat(129), 'must be 1 to 128 characters of letters, digits and . _ : / -'],
    ['acme%00', 'must not contain NUL (U+0000) or unpaired UTF-16 surrogates'],
  ] as const) {
    const res = await call('GET', `/api/v1/requests?account=${value}`);
    t.equal(res.statusCode, 400, value);
    t.same(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', param: 'account', message: `query field 'account': ${rule}` } }, value);
  }
  const res = await call('GET', `/api/v1/requests?accountId=${acme}`);
  t.equal(res.statusCode, 400, 'the parameter is account, as on /leases');
});

t.test('an account filter naming no account is a 404, as /leases?account= answers', async (t) => {
  for (const unknown of ['no-such-account', '00000000-0000-4000-8000-000000000000']) {
    const res = await call('GET', `/api/v1/requests?account=${unknown}`);
    t.equal(res.statusCode, 404, unknown);
    t.same(res.json<{ error: { code: string; message: string } }>().error, { code: 'ZN_ERR_CP_ACCOUNT_NOT_FOUND', type: 'not_found_error', param: null, message: `No account named or with id '${unknown}'.` }, unknown);
    const leases = await call('GET', `/api/v1/leases?account=${unknown}`);
    t.equal(leases.statusCode, 404, `${unknown}: /leases answers so too`);
  }
});

t.test("the account filter reads an index on the records' account in received_at order, without sorting the records whole", async (t) => {
  const text = await indexOnlyPlan(pool, listRecordsQuery({ accountId: acme, limit: 50 }));
  t.match(text, /Index Scan using request_records_p\d+_account_id_received_at_idx/, text);
  t.match(text, /Index Cond: \(account_id = /, text);
  // An incremental sort only orders the rows that share a received_at (the index's second column).
  t.notMatch(text, /(?<!Incremental )Sort {2}\(|Seq Scan/, text);
});
