/**
 * A top-up's `reference` is its idempotency key within the account: a retried top-up (a script or
 * proxy sending a timed-out call again) credits nothing more, on real PostgreSQL. The concurrent
 * case is made deterministic by an outside transaction that holds the account's balance lock until
 * both retries are waiting on it.
 */
import t from 'tap';
import pg from 'pg';
import { testDatabase } from '../../fixtures/postgres.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { configApp } from '../config-harness.js';
import { migratedPool } from '../nodes-harness.js';
import { insertAccount, storedBalance } from './billing-fixtures.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call } = await configApp(t, db.url);

async function creditRows(accountId: string, reference: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `select count(*)::int as n from billing_ledger where account_id = $1 and kind = 'credit' and reference = $2`,
    [accountId, reference],
  );
  return rows[0]!.n;
}

t.test('a top-up sent again with the same reference and amount is answered 200 replayed and credits nothing', async (t) => {
  const accountId = await insertAccount(pool, 'retry-acme');
  const first = await call('POST', '/api/v1/accounts/retry-acme/credits', { amountMicros: 5_000_000, reference: 'invoice-42' });
  t.equal(first.statusCode, 201, first.body);
  t.match(first.json(), { replayed: false, balance: { balanceMicros: 5_000_000 } });
  const retry = await call('POST', '/api/v1/accounts/retry-acme/credits', { amountMicros: 5_000_000, reference: 'invoice-42' });
  t.equal(retry.statusCode, 200, retry.body);
  t.match(retry.json(), { replayed: true, balance: { balanceMicros: 5_000_000 } });
  t.equal(await creditRows(accountId, 'invoice-42'), 1, 'one credit row for the reference');
  t.equal((await storedBalance(pool, accountId)).balance, 5_000_000n);
});

t.test('a replayed top-up answers the balance as it is now', async (t) => {
  const accountId = await insertAccount(pool, 'retry-later');
  await call('POST', '/api/v1/accounts/retry-later/credits', { amountMicros: 1_000, reference: 'pay-1' });
  await call('POST', '/api/v1/accounts/retry-later/credits', { amountMicros: 300, reference: 'pay-2' });
  const retry = await call('POST', `/api/v1/accounts/${accountId}/credits`, { amountMicros: 1_000, reference: 'pay-1' });
  t.equal(retry.statusCode, 200, retry.body);
  t.match(retry.json(), { replayed: true, balance: { balanceMicros: 1_300 } });
});

t.test('the same reference with another amount is refused 409 and credits nothing', async (t) => {
  const accountId = await insertAccount(pool, 'retry-other-amount');
  await call('POST', '/api/v1/accounts/retry-other-amount/credits', { amountMicros: 5_000_000, reference: 'invoice-7' });
  const other = await call('POST', '/api/v1/accounts/retry-other-amount/credits', { amountMicros: 6_000_000, reference: 'invoice-7' });
  t.equal(other.statusCode, 409, other.body);
  t.match(other.json(), { error: { code: 'ZN_ERR_CP_CREDIT_REFERENCE_USED', type: 'conflict_error', message: /5000000 micro-units/ } });
  t.equal(await creditRows(accountId, 'invoice-7'), 1);
  t.equal((await storedBalance(pool, accountId)).balance, 5_000_000n);
});

t.test('a reference is a key within its account: another account may use it', async (t) => {
  await insertAccount(pool, 'ref-one');
  const otherId = await insertAccount(pool, 'ref-two');
  await call('POST', '/api/v1/accounts/ref-one/credits', { amountMicros: 100, reference: 'shared-ref' });
  const res = await call('POST', '/api/v1/accounts/ref-two/credits', { amountMicros: 100, reference: 'shared-ref' });
  t.equal(res.statusCode, 201, res.body);
  t.equal((await storedBalance(pool, otherId)).balance, 100n);
});

t.test('top-ups without a reference are never taken for retries', async (t) => {
  const accountId = await insertAccount(pool, 'no-reference');
  for (const body of [{ amountMicros: 100 }, { amountMicros: 100, reference: null }]) {
    const res = await call('POST', '/api/v1/accounts/no-reference/credits', body);
    t.equal(res.statusCode, 201, res.body);
    t.equal(res.json<{ replayed: boolean }>().replayed, false);
  }
  t.equal((await storedBalance(pool, accountId)).balance, 200n);
});

t.test('a reference a ledger already holds twice (written before the rule) is a retry of either amount', async (t) => {
  const accountId = await insertAccount(pool, 'legacy-duplicates');
  await pool.query(
    `insert into billing_ledger (account_id, kind, amount_micros, reference) values ($1, 'credit', 10, 'old'), ($1, 'credit', 20, 'old')`,
    [accountId],
  );
  for (const amountMicros of [10, 20]) {
    const res = await call('POST', '/api/v1/accounts/legacy-duplicates/credits', { amountMicros, reference: 'old' });
    t.equal(res.statusCode, 200, `amount ${amountMicros}: ${res.body}`);
  }
  const other = await call('POST', '/api/v1/accounts/legacy-duplicates/credits', { amountMicros: 30, reference: 'old' });
  t.equal(other.statusCode, 409, other.body);
  t.equal(await creditRows(accountId, 'old'), 2);
});

t.test('two concurrent top-ups with the same reference credit once', async (t) => {
  const accountId = await insertAccount(pool, 'retry-race');
  await pool.query('insert into account_balances (account_id) values ($1)', [accountId]);
  const holder = new pg.Client({ connectionString: db.url });
  await holder.connect();
  t.teardown(() => holder.end());
  await holder.query('begin');
  await holder.query('select 1 from account_balances where account_id = $1 for update', [accountId]);

  const waitingOnBalanceLock = async (): Promise<number> => {
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock' and query like '%from account_balances%for update%'`,
    );
    return rows[0]!.n;
  };
  const body = { amountMicros: 5_000_000, reference: 'invoice-race' };
  const both = Promise.all([
    call('POST', '/api/v1/accounts/retry-race/credits', body),
    call('POST', '/api/v1/accounts/retry-race/credits', body),
  ]);
  await waitFor(async () => (await waitingOnBalanceLock()) >= 2, { what: 'both top-ups to wait on the account lock' });
  await holder.query('commit');

  const answers = await both;
  t.same(answers.map((r) => r.statusCode).sort(), [200, 201], answers.map((r) => r.body).join('\n'));
  t.equal(await creditRows(accountId, 'invoice-race'), 1, 'one credit row');
  t.equal((await storedBalance(pool, accountId)).balance, 5_000_000n, 'credited once');
  for (const answer of answers) t.equal(answer.json<{ balance: { balanceMicros: number } }>().balance.balanceMicros, 5_000_000);
});

t.test('a blank reference, or one with white space at an end, is refused: it would key later top-ups as replays', async (t) => {
  const accountId = await insertAccount(pool, 'retry-blank');
  for (const reference of ['', '   ', 'INV-1 ', ' INV-1', '\tINV-1']) {
    const res = await call('POST', '/api/v1/accounts/retry-blank/credits', { amountMicros: 1_000_000, reference });
    t.equal(res.statusCode, 400, JSON.stringify(reference));
    t.match(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /^reference: must not be empty/ } });
  }
  const { rows } = await pool.query<{ n: number }>('select count(*)::int as n from billing_ledger where account_id = $1', [accountId]);
  t.equal(rows[0]!.n, 0, 'nothing credited');
  t.equal((await call('POST', '/api/v1/accounts/retry-blank/credits', { amountMicros: 1, reference: 'INV 1' })).statusCode, 201, 'inner white space is fine');
  t.equal((await call('POST', '/api/v1/accounts/retry-blank/credits', { amountMicros: 1 })).statusCode, 201, 'no reference');
  t.equal((await call('POST', '/api/v1/accounts/retry-blank/credits', { amountMicros: 1, reference: null })).statusCode, 201, 'a null reference');
});
