// A database connection that ends while a transaction holds it (a PostgreSQL restart, a failover,
// pg_terminate_backend) fails that transaction and nothing else: before, the checked-out client's
// 'error' had no listener and the whole control plane exited.
import t from 'tap';
import { createPool } from '../../control-plane/src/db/pool.js';
import { withTransaction } from '../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';

const db = await testDatabase(t);

t.test('a connection terminated between two statements of a transaction rejects it, and the pool goes on serving', async (t) => {
  const warnings: string[] = [];
  const logger = { warn: (_obj: unknown, msg: string) => void warnings.push(msg) } as unknown as Parameters<typeof createPool>[0]['logger'];
  const pool = createPool({ databaseUrl: db.url, logger });
  t.teardown(() => pool.end());

  const outcome = await withTransaction(pool, async (client) => {
    const pid = (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
    let ended = false;
    client.once('end', () => {
      ended = true;
    });
    // Another connection ends this one while no query of it is running.
    await pool.query('select pg_terminate_backend($1)', [pid]);
    await waitFor(() => ended, { what: 'the terminated connection to end' });
    await client.query('select 1');
    return 'committed';
  }).then(
    (value) => value,
    (err: Error) => `rejected: ${err.message}`,
  );
  t.match(outcome, /^rejected: /, 'the transaction fails');
  t.ok(warnings.some((w) => /in use failed/.test(w)), 'the lost connection is logged');
  // The pool replaces the broken client.
  const after = await withTransaction(pool, async (client) => (await client.query<{ one: number }>('select 1 as one')).rows[0]!.one);
  t.equal(after, 1, 'the next transaction runs on a new connection');
});
