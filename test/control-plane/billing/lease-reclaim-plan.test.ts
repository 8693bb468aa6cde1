// The reclaim check every live node's lease refresh makes per account without free credit
// (accountsToLeaseQuery) reads only the leases that can answer it: the partial index of migration
// 0018 (open leases, closed ones still holding credit), not an account's whole lease history, which
// grows by one lease per close or restart.
import t from 'tap';
import { accountsToLeaseQuery } from '../../../control-plane/src/billing/credit-leases.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { migratedPool } from '../nodes-harness.js';
import { insertAccount, insertNode } from './billing-fixtures.js';

t.test("the reclaim check reads the reclaimable leases' index, not every lease the account ever had", async (t) => {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);
  const account = await insertAccount(pool);
  const node = await insertNode(pool);
  await pool.query('insert into account_balances (account_id, balance_micros, outstanding_micros) values ($1, 0, 0) on conflict (account_id) do nothing', [account]);
  // A long history: 5 000 leases closed with nothing held, and one open.
  await pool.query(
    `insert into credit_leases (node_id, account_id, state, granted_micros, returned_micros, expires_at, closed_at)
     select $1, $2, 'returned', 10, 10, now(), now() from generate_series(1, 5000)`,
    [node, account],
  );
  await pool.query("insert into credit_leases (node_id, account_id, expires_at) values ($1, $2, now() + interval '1 day')", [node, account]);
  await pool.query('analyze credit_leases');
  const client = await pool.connect();
  try {
    const query = accountsToLeaseQuery(node, Date.now(), 3_600_000);
    const { rows } = await client.query<{ 'QUERY PLAN': string }>({ text: `explain ${query.text}`, values: query.values });
    const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
    t.match(plan, /credit_leases_reclaimable_idx/, plan);
    t.notMatch(plan, /Seq Scan on credit_leases/, 'no scan of the whole table');
  } finally {
    client.release();
  }
});
