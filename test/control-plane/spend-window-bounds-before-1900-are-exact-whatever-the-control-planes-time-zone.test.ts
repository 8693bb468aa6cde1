/**
 * GET /spend's from/to are the instants asked for in any time zone of the control plane's process:
 * its bounds went to PostgreSQL as JS Dates, which pg writes in local time, and before ~1900 a zone's
 * offset (local mean time: +08:05:43 in Asia/Shanghai) has seconds the Date's offset drops, so year
 * 1's 00:00:00Z became 00:00:43Z and a charge at 00:00:30Z fell out of the window. Now epoch ms.
 */
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';

// Before any Date is made in this process: the control plane running in a zone with such an offset.
process.env.TZ = 'Asia/Shanghai';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { call, pool } = await configApp(t, db.url);

t.test('a charge 30 s after year 1 began is in the window [year 1, +40 s) asked in unix ms or ISO 8601', async (t) => {
  t.equal(new Date(-62135596800000).getTimezoneOffset() % 1, 0, 'the Date offset is whole minutes (the seconds are dropped)');
  const account = expectStatus<{ account: { id: string } }>(await call('POST', '/api/v1/accounts', { name: uniqueConfigName('lmt') }), 201).account;
  await pool.query(
    `insert into billing_ledger (account_id, kind, amount_micros, request_id, occurred_at) values ($1, 'debit', 7, 'lmt-1', '0001-01-01T00:00:30Z')`,
    [account.id],
  );
  for (const window of ['from=-62135596800000&to=-62135596760000', 'from=0001-01-01T00:00:00Z&to=0001-01-01T00:00:40Z']) {
    const spend = expectStatus<{ rows: { id: string; spentMicros: unknown }[] }>(await call('GET', `/api/v1/spend?by=account&${window}`), 200);
    const row = spend.rows.find((r) => r.id === account.id);
    t.ok(row !== undefined, `${window}: the charge is in the window`);
    t.equal(String(row?.spentMicros), '7', window);
  }
  // The other bound: a window ending at 00:00:30Z exactly does not hold it (to is exclusive).
  const before = expectStatus<{ rows: { id: string }[] }>(await call('GET', '/api/v1/spend?by=account&from=-62135596800000&to=-62135596770000'), 200);
  t.notOk(before.rows.some((r) => r.id === account.id), 'to 00:00:30Z (exclusive) leaves it out');
});
