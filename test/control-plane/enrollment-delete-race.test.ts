/**
 * Enrollment and node delete lock the node row and the token rows in the same order, so running
 * them at once serialises them instead of deadlocking (PostgreSQL "deadlock detected" was a 500).
 * The interleaving is made deterministic by an outside transaction that holds the token's row lock
 * until both requests are waiting.
 */
import t from 'tap';
import pg from 'pg';
import { hashInstallToken } from '../../control-plane/src/nodes/install-tokens.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bearer, createNode, enroll, migratedPool, nodesApp } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { app, log } = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 1_000 } });

/** Backends of this database waiting for a lock: the requests in flight, once they block. */
async function waitingOnLocks(): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`,
  );
  return rows[0]!.n;
}

t.test('enrolling a node while it is being deleted finishes both, without a deadlock', async (t) => {
  const { node, install } = await createNode(app);
  const holder = new pg.Client({ connectionString: db.url });
  await holder.connect();
  t.teardown(() => holder.end());
  await holder.query('begin');
  await holder.query('select 1 from install_tokens where token_hash = $1 for update', [hashInstallToken(install.token)]);

  const enrolling = enroll(app, install.token);
  await waitFor(async () => (await waitingOnLocks()) >= 1, { what: 'the enrollment to wait on a lock' });
  const deleting = app.inject({ method: 'DELETE', url: `/api/v1/nodes/${node.name}`, headers: bearer });
  await waitFor(async () => (await waitingOnLocks()) >= 2, { what: 'the delete to wait on a lock' });
  await holder.query('commit');

  const [enrolled, deleted] = await Promise.all([enrolling, deleting]);
  // The enrollment took the node's lock first, so it completes; the delete then removes the node
  // (and revokes the credential just issued).
  t.equal(enrolled.statusCode, 200, enrolled.body);
  t.equal(deleted.statusCode, 200, deleted.body);
  const { rows } = await pool.query<{ live: number }>(
    'select count(*)::int as live from node_credentials where node_id = $1 and revoked_at is null', [node.id],
  );
  t.equal(rows[0]!.live, 0, 'the deleted node keeps no usable credential');
  t.notOk(log.lines().some((line) => JSON.stringify(line).includes('deadlock')), 'no deadlock was logged');
});
