// A list's cursor pages that list only: /api-keys and /leases both page newest first by
// (created_at, uuid), and a key cursor sent to /leases read as a lease position (a page starting at
// the key's creation time). Every list that issues cursors refuses every other list's.
import t from 'tap';
import { ingestRecords } from '../../control-plane/src/records/record-ingestion.js';
import { testDatabase } from '../fixtures/postgres.js';
import { insertAccount, insertNode } from './billing/billing-fixtures.js';
import { configApp, expectStatus } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';
import { NODE_ID, record } from '../edge-node/spool/spool-helpers.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call } = await configApp(t, db.url);

interface ErrorReply { error: { code: string; message: string } }
interface Page { nextCursor: string | null }

// Two or more rows in each list, so a page of one has a next cursor. The keys come first and the
// leases after them: a key's position, read as a lease's, skips every lease.
const accountId = await insertAccount(pool, 'cursor-owner');
for (const name of ['k1', 'k2']) expectStatus(await call('POST', '/api/v1/api-keys', { account: 'cursor-owner', name }), 201);
await insertAccount(pool, 'cursor-other');
// One open lease per node and account: three nodes.
const nodeIds = [await insertNode(pool, 'cursor-edge-1'), await insertNode(pool, 'cursor-edge-2'), await insertNode(pool, 'cursor-edge-3')];
const nodeId = nodeIds[0]!;
await pool.query(
  `insert into credit_leases (node_id, account_id, granted_micros, expires_at, created_at)
   select n, $2, 5, now() + interval '1 day', now() + interval '1 second' from unnest($1::uuid[]) n`,
  [nodeIds, accountId],
);
await pool.query(
  `insert into billing_ledger (account_id, kind, amount_micros, node_id, request_id, key_id, model, occurred_at)
   select $1, 'debit', g, $2, 'charge-' || g, 'spend-key-' || g, 'm', now() - interval '1 hour' from generate_series(1, 3) g`,
  [accountId, nodeId],
);
const receivedAt = Date.now() - 60_000;
await ingestRecords(pool, { nodeId: NODE_ID, nodeName: 'edge-a' }, ['rec-1', 'rec-2'].map((id, i) => record(id, { receivedAt: receivedAt + i, finishedAt: receivedAt + i })));

/** Every list that issues a cursor, at a first page of one row. */
const lists = {
  '/api/v1/accounts': '/api/v1/accounts?limit=1',
  '/api/v1/api-keys': '/api/v1/api-keys?limit=1',
  '/api/v1/leases': '/api/v1/leases?limit=1',
  '/api/v1/spend': '/api/v1/spend?by=key&limit=1',
  '/api/v1/requests': '/api/v1/requests?limit=1',
} as const;
type List = keyof typeof lists;

async function firstCursor(list: List): Promise<string> {
  const cursor = expectStatus<Page>(await call('GET', lists[list]), 200).nextCursor;
  if (cursor === null) throw new Error(`${list}: one page holds every row; the set-up needs more`);
  return cursor;
}

const withCursor = (list: List, cursor: string): string => `${list}?cursor=${encodeURIComponent(cursor)}`;

t.test('a cursor from /api-keys sent to /leases, and one from /leases sent to /api-keys, is a 400 naming the list it came from', async (t) => {
  const keyCursor = await firstCursor('/api/v1/api-keys');
  const leaseCursor = await firstCursor('/api/v1/leases');
  for (const [to, cursor, from] of [['/api/v1/leases', keyCursor, 'api-keys'], ['/api/v1/api-keys', leaseCursor, 'leases']] as const) {
    const res = await call('GET', withCursor(to, cursor));
    t.equal(res.statusCode, 400, `${from} cursor on ${to}: ${res.body.slice(0, 300)}`);
    t.match(res.json<ErrorReply>(), {
      error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: `cursor: from GET /api/v1/${from}, not this list; send a cursor only to the list that returned it` },
    }, `${from} cursor on ${to}`);
  }
});

t.test('every list that issues cursors refuses the cursor of each other list, and pages on with its own', async (t) => {
  const cursors = new Map<List, string>();
  for (const list of Object.keys(lists) as List[]) cursors.set(list, await firstCursor(list));
  for (const [list, own] of cursors) {
    t.equal((await call('GET', withCursor(list, own))).statusCode, 200, `${list} takes its own cursor`);
    for (const [from, cursor] of cursors) {
      if (from === list) continue;
      const res = await call('GET', withCursor(list, cursor));
      t.equal(res.statusCode, 400, `${from}'s cursor on ${list}: ${res.body.slice(0, 300)}`);
      t.match(res.json<ErrorReply>(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /^cursor: / } }, `${from}'s cursor on ${list}`);
    }
  }
});

t.test('a key or lease cursor written as before the lists were told apart is a 400 saying to start from the first page', async (t) => {
  for (const list of ['/api/v1/api-keys', '/api/v1/leases'] as const) {
    const rows = await pool.query<{ us: string; id: string }>(
      list === '/api/v1/api-keys'
        ? 'select (extract(epoch from created_at) * 1000000)::bigint::text as us, id from api_keys order by created_at desc, id desc limit 1'
        : 'select (extract(epoch from created_at) * 1000000)::bigint::text as us, id from credit_leases order by created_at desc, id desc limit 1',
    );
    const untagged = `${rows.rows[0]!.us}.${rows.rows[0]!.id}`;
    const res = await call('GET', withCursor(list, untagged));
    t.equal(res.statusCode, 400, `${list}: ${res.body.slice(0, 300)}`);
    t.match(res.json<ErrorReply>(), {
      error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /^cursor: from before an upgrade .*start again from the first page \(leave out cursor\)$/ },
    }, list);
  }
});
