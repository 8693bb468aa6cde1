// The billing lists in keyset pages: walking /spend and /leases reaches every row exactly once,
// the balance says when its lease list is cut, and a cursor the API did not issue is a 400.
import t from 'tap';
import { encodeSpendCursor, MAX_SPEND_CURSOR_LENGTH } from '../../../control-plane/src/billing/billing-cursors.js';
import { listLeasesQuery } from '../../../control-plane/src/billing/billing-views.js';
import type { LeaseFilter } from '../../../control-plane/src/billing/billing-views.js';
import { indexOnlyPlan } from '../../fixtures/index-plan.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { configApp, walkPages } from '../config-harness.js';
import { migratedPool } from '../nodes-harness.js';
import { insertAccount, insertNode } from './billing-fixtures.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call } = await configApp(t, db.url);

interface SpendPage { by: string; from: string; to: string; rows: Array<{ id: string | null; spentMicros: number; requests: number }>; nextCursor: string | null }
interface LeasePage { leases: Array<{ leaseId: string; grantedMicros: number }>; nextCursor: string | null }

const walk = <P extends { nextCursor: string | null }>(url: string): Promise<P[]> => walkPages<P>(call, url);

const accountId = await insertAccount(pool, 'acme');
const nodeId = await insertNode(pool, 'edge-1');
// A closed window in the past: 40 charges, one per key, in amounts 1..3 so ties cross every page
// boundary, and 3 of 1 without a key (one group, the null id, tied with the keys charged 3).
const FROM = '2026-01-01T00:00:00Z';
const TO = '2026-01-02T00:00:00Z';
await pool.query(
  `insert into billing_ledger (account_id, kind, amount_micros, node_id, request_id, key_id, model, occurred_at)
   select $1, 'debit', case when g > 40 then 1 else g % 3 + 1 end, $2, 'req-' || g, case when g > 40 then null else 'key-' || g end, 'm', '2026-01-01T12:00:00Z'
     from generate_series(1, 43) g`,
  [accountId, nodeId],
);

t.test('walking every page of spend by key lists each key once, in the order and with the totals of one unpaged answer', async (t) => {
  const pages = await walk<SpendPage>(`/api/v1/spend?by=key&from=${FROM}&to=${TO}&limit=4`);
  t.equal(pages.length, 11, '41 groups, 4 a page');
  const rows = pages.flatMap((p) => p.rows);
  const ids = rows.map((r) => r.id);
  t.equal(new Set(ids).size, 41, 'no group twice');
  t.ok(ids.includes(null), 'the charges without a key are a group too');
  const whole = (await call('GET', `/api/v1/spend?by=key&from=${FROM}&to=${TO}&limit=10000`)).json<SpendPage>();
  t.equal(whole.nextCursor, null);
  t.same(rows, whole.rows, 'the pages together are the unpaged answer');
  const byAccount = (await call('GET', `/api/v1/spend?by=account&from=${FROM}&to=${TO}`)).json<SpendPage>();
  const sum = (rs: SpendPage['rows']): number => rs.reduce((s, r) => s + r.spentMicros, 0);
  t.equal(sum(rows), sum(byAccount.rows), 'the same total as by account');
  t.equal(rows.reduce((s, r) => s + r.requests, 0), 43);
  t.ok(pages.every((p) => p.by === 'key' && p.from === '2026-01-01T00:00:00.000Z' && p.to === '2026-01-02T00:00:00.000Z'), 'each page answers for the same query');
});

t.test("the next pages of spend keep the first page's window, though its `to` was now", async (t) => {
  await pool.query(
    `insert into billing_ledger (account_id, kind, amount_micros, node_id, request_id, key_id, model, occurred_at)
     select $1, 'debit', 5, $2, 'recent-' || g, 'recent-key-' || g, 'm', now() - interval '1 hour' from generate_series(1, 3) g`,
    [accountId, nodeId],
  );
  const first = (await call('GET', '/api/v1/spend?by=key&limit=2')).json<SpendPage>();
  t.equal(first.rows.length, 2);
  // Charged at the first page's `to` (exclusive): a window that moved on to a later now would list it last.
  await pool.query(
    `insert into billing_ledger (account_id, kind, amount_micros, node_id, request_id, key_id, model, occurred_at)
     values ($1, 'debit', 1, $2, 'late', 'zz-late-key', 'm', $3)`,
    [accountId, nodeId, first.to],
  );
  const second = await call('GET', `/api/v1/spend?limit=2&cursor=${encodeURIComponent(first.nextCursor!)}`);
  t.equal(second.statusCode, 200, second.body);
  t.match(second.json(), { by: 'key', from: first.from, to: first.to, nextCursor: null });
  t.same(second.json<SpendPage>().rows.map((r) => r.id), ['recent-key-3']);
});

t.test('a spend cursor the API did not issue, or sent with another query, is a 400 naming the cursor', async (t) => {
  const first = (await call('GET', `/api/v1/spend?by=key&from=${FROM}&to=${TO}&limit=4`)).json<SpendPage>();
  const cursor = first.nextCursor!;
  const fromMs = Date.parse(FROM);
  const toMs = Date.parse(TO);
  const notOurs = {
    'garbage': 'nonsense',
    'an altered cursor': cursor.replace(/\.(\d+)\./, (_, n: string) => `.0${n}.`),
    'NUL in the id': encodeSpendCursor({ by: 'key', fromMs, toMs, spentMicros: 3n, id: 'a\u0000b' }),
    'an id over 128 characters': encodeSpendCursor({ by: 'key', fromMs, toMs, spentMicros: 3n, id: 'k'.repeat(129) }),
    'an id over 128 characters of 4 UTF-8 bytes': encodeSpendCursor({ by: 'key', fromMs, toMs, spentMicros: 3n, id: '\u{1F600}'.repeat(129) }),
    'a backwards window': encodeSpendCursor({ by: 'key', fromMs: toMs, toMs: fromMs, spentMicros: 3n, id: 'k' }),
    'a spend past bigint': encodeSpendCursor({ by: 'key', fromMs, toMs, spentMicros: 2n ** 63n, id: 'k' }),
    'a lease cursor': `1767225600000000.${accountId}`,
  };
  for (const [what, text] of Object.entries(notOurs)) {
    const res = await call('GET', `/api/v1/spend?cursor=${encodeURIComponent(text)}`);
    t.equal(res.statusCode, 400, `${what}: ${res.body.slice(0, 200)}`);
    t.match(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: 'cursor: not a cursor this API returned' } }, what);
  }
  for (const query of ['by=account', `to=${toMs + 1}`, 'from=2025-12-31T00:00:00Z']) {
    const res = await call('GET', `/api/v1/spend?${query}&cursor=${encodeURIComponent(cursor)}`);
    t.equal(res.statusCode, 400, `${query}: ${res.body.slice(0, 200)}`);
    t.match(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /^cursor: from a query with another/ } }, query);
  }
  const same = await call('GET', `/api/v1/spend?by=key&from=${FROM}&to=${toMs}&limit=4&cursor=${encodeURIComponent(cursor)}`);
  t.equal(same.statusCode, 200, 'the first page\'s by, from and to may be sent again');
  // Digits only, one rule in the message: ' 1', '1e1' and '0x10' were read as numbers.
  for (const limit of ['0', '10001', '1.5', 'x', '%201', '1e1', '0x10', '01', '', '-1']) {
    const res = await call('GET', `/api/v1/spend?limit=${limit}`);
    t.equal(res.statusCode, 400, `limit=${limit}`);
    t.match(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: "query field 'limit': must be a whole number from 1 to 10000" } }, `limit=${limit}`);
  }
  t.equal((await call('GET', '/api/v1/spend?limit=10000')).statusCode, 200, 'the maximum');
  // The default window (30 days before `to`) starts no earlier than year 1, like every time here.
  t.match((await call('GET', '/api/v1/spend?to=0001-01-02T00:00:00Z')).json(), { from: '0001-01-01T00:00:00.000Z', to: '0001-01-02T00:00:00.000Z' });
  t.equal((await call('GET', '/api/v1/leases?limit=1000')).statusCode, 200, 'the leases maximum');
});

t.test('a key id of 128 characters outside the BMP (256 UTF-16 code units, as the record schema counts them) is paged past', async (t) => {
  const wide = '\u{1F600}'.repeat(128);
  await pool.query(
    `insert into billing_ledger (account_id, kind, amount_micros, node_id, request_id, key_id, model, occurred_at)
     values ($1, 'debit', 7, $2, 'wide-1', $3, 'm', '2025-06-01T12:00:00Z'), ($1, 'debit', 6, $2, 'wide-2', 'narrow-key', 'm', '2025-06-01T12:00:00Z')`,
    [accountId, nodeId, wide],
  );
  const pages = await walk<SpendPage>('/api/v1/spend?by=key&from=2025-06-01T00:00:00Z&to=2025-06-02T00:00:00Z&limit=1');
  t.same(pages.flatMap((p) => p.rows.map((r) => r.id)), [wide, 'narrow-key'], 'its cursor is taken back and the walk goes on');
});

t.test('the longest spend cursor the API can issue is exactly the longest /spend accepts', async (t) => {
  const longest = encodeSpendCursor({
    by: 'account', fromMs: Date.parse('0001-01-01T00:00:00Z'), toMs: Date.parse('0001-01-01T00:00:00.001Z'), spentMicros: 2n ** 63n - 1n, id: '\u{1F600}'.repeat(128),
  });
  t.equal(longest.length, MAX_SPEND_CURSOR_LENGTH);
  t.equal((await call('GET', `/api/v1/spend?cursor=${encodeURIComponent(longest)}`)).statusCode, 200);
  t.equal((await call('GET', `/api/v1/spend?cursor=${encodeURIComponent(longest)}A`)).statusCode, 400);
});

t.test("walking every page of a node's leases lists each lease once, though they were granted in one instant", async (t) => {
  const node = await insertNode(pool, 'edge-many');
  // One statement: every lease has the same created_at, so only the id orders them.
  await pool.query(`insert into accounts (name) select 'lessee-' || g from generate_series(1, 23) g`);
  await pool.query(
    `insert into credit_leases (node_id, account_id, granted_micros, expires_at)
     select $1, id, 5, now() + interval '1 day' from accounts where name like 'lessee-%'`,
    [node],
  );
  const pages = await walk<LeasePage>('/api/v1/leases?node=edge-many&limit=5');
  t.equal(pages.length, 5);
  const leases = pages.flatMap((p) => p.leases);
  t.equal(new Set(leases.map((l) => l.leaseId)).size, 23, 'each lease once');
  t.equal(leases.reduce((s, l) => s + l.grantedMicros, 0), 23 * 5);
  t.same(leases, (await call('GET', '/api/v1/leases?node=edge-many&limit=1000')).json<LeasePage>().leases, 'the pages together are the unpaged answer');

  t.equal(pages[0]!.leases.length, 5);
  for (const text of ['nonsense', `01.${pages[0]!.leases[0]!.leaseId}`, `${pages[0]!.nextCursor!}0`, '1.00000000-0000-4000-8000-00000000000G']) {
    const res = await call('GET', `/api/v1/leases?cursor=${encodeURIComponent(text)}`);
    t.equal(res.statusCode, 400, text);
    t.match(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: 'cursor: not a cursor this API returned' } }, text);
  }
  t.equal((await call('GET', '/api/v1/leases?limit=1001')).statusCode, 400);
});

t.test("an account's leases are listed by /leases?account=; its balance counts every lease and says when its list is cut", async (t) => {
  const heavy = await insertAccount(pool, 'heavy');
  const node = await insertNode(pool, 'edge-heavy');
  // The one open lease is the oldest, so a list of the newest 1000 leaves it out.
  await pool.query(
    `insert into credit_leases (node_id, account_id, granted_micros, expires_at, created_at) values ($1, $2, 700, now() + interval '1 day', now() - interval '1 day')`,
    [node, heavy],
  );
  await pool.query(
    `insert into credit_leases (node_id, account_id, state, granted_micros, returned_micros, expires_at, closed_at)
     select $1, $2, 'returned', 5, 5, now(), now() from generate_series(1, 1000)`,
    [node, heavy],
  );
  t.equal((await call('POST', '/api/v1/accounts/heavy/credits', { amountMicros: 1000 })).statusCode, 201);

  const res = await call('GET', '/api/v1/accounts/heavy/balance');
  t.equal(res.statusCode, 200);
  const body = res.json<{ balance: { outstandingLeasesMicros: number; availableMicros: number }; leases: Array<{ state: string }>; leasesTruncated: boolean }>();
  t.equal(body.leases.length, 1000);
  t.equal(body.leasesTruncated, true);
  t.notOk(body.leases.some((l) => l.state === 'open'), 'the open lease is past the cut');
  t.match(body.balance, { outstandingLeasesMicros: 700, availableMicros: 300 }, 'the figures count the lease the list leaves out');

  const all = (await walk<LeasePage>('/api/v1/leases?account=heavy&limit=1000')).flatMap((p) => p.leases);
  t.equal(all.length, 1001);
  t.equal((await call('GET', '/api/v1/accounts/acme/balance')).json<{ leasesTruncated: boolean }>().leasesTruncated, false);
  t.match((await call('GET', '/api/v1/leases?account=nobody')).json(), { error: { code: 'ZN_ERR_CP_ACCOUNT_NOT_FOUND' } });
});

t.test('every lease list page reads an index in (created_at, id) order from its cursor, without sorting the leases whole', async (t) => {
  // The cursor must be the index range's bound, not a filter on every row read.
  const plan = (filter: Omit<LeaseFilter, 'limit'>): Promise<string> => indexOnlyPlan(pool, listLeasesQuery({ ...filter, limit: 50 }));
  const cursor = { createdAtUs: 1767225600000000n, id: '00000000-0000-4000-8000-000000000000' };
  for (const [filter, index] of [
    [{}, 'credit_leases_created_idx'],
    [{ cursor }, 'credit_leases_created_idx'],
    [{ nodeId, cursor }, 'credit_leases_node_created_idx'],
    [{ accountId, cursor }, 'credit_leases_account_created_idx'],
  ] as const) {
    const text = await plan(filter);
    t.match(text, new RegExp(`Index Scan using ${index}`), `${JSON.stringify(Object.keys(filter))}: ${text}`);
    t.notMatch(text, /\bSort\b/, 'no sort of the leases');
    if ('cursor' in filter) t.match(text, /Index Cond: .*created_at/, `the cursor bounds the index range: ${text}`);
  }
});

t.test('a lease cursor carries created_at to the microsecond: leases a microsecond apart fall on either side of a page boundary', async (t) => {
  const id = await insertNode(pool, 'edge-micro');
  await pool.query(
    `insert into credit_leases (node_id, account_id, state, granted_micros, returned_micros, expires_at, closed_at, created_at)
     select $1, $2, 'returned', 1, 1, now(), now(), timestamptz '2026-03-01T00:00:00.000001Z' + g * interval '1 microsecond' from generate_series(0, 5) g`,
    [id, accountId],
  );
  const pages = await walk<LeasePage>('/api/v1/leases?node=edge-micro&limit=1');
  t.equal(pages.flatMap((p) => p.leases).length, 6, 'every lease once, none skipped or repeated at a boundary');
  t.equal(new Set(pages.flatMap((p) => p.leases.map((l) => l.leaseId))).size, 6);
});
