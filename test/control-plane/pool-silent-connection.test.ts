// A pooled connection that goes silent — no FIN, no RST: a hung server, a failover moving the
// address, a NAT or firewall dropping the flow — fails its query within the pool's client-side bound
// as "database unavailable" (an admin call: 503 with Retry-After), and is cut rather than handed
// out again, so the next query runs on a fresh connection. Before, such a query waited as long as
// the silence lasted: the server's statement_timeout cannot cancel anything it never hears about.
import t from 'tap';
import type { Test } from 'tap';
import { buildApp } from '../../control-plane/src/app.js';
import { migrate } from '../../control-plane/src/db/migrate.js';
import { createPool } from '../../control-plane/src/db/pool.js';
import { toZenovaError } from '../../control-plane/src/http/error-handler.js';
import { testDatabase } from '../fixtures/postgres.js';
import { startSilentTcpProxy } from '../fixtures/silent-tcp-proxy.js';
import { runEach } from '../fixtures/teardown-steps.js';
import { ADMIN_TOKEN, captureLogger, testSettings } from './helpers.js';

const db = await testDatabase(t);
{
  const pool = createPool({ databaseUrl: db.url });
  await migrate(pool);
  await pool.end();
}

const STATEMENT_TIMEOUT_MS = 1_000;
const QUERY_TIMEOUT_MS = 1_500;
// What "within the bound" allows on a loaded machine; a query with no client-side bound never settles.
const SETTLED_WITHIN_MS = QUERY_TIMEOUT_MS + 2_000;
// How long the test waits before calling a query hung (so a regression fails instead of hanging).
const HUNG_AFTER_MS = 10_000;

type Outcome<T> = { status: 'resolved'; value: T; ms: number } | { status: 'rejected'; err: unknown; ms: number } | { status: 'pending'; ms: number };

/** How `promise` settled, and after how long; 'pending' once HUNG_AFTER_MS passed. */
async function outcome<T>(promise: Promise<T>): Promise<Outcome<T>> {
  const started = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<Outcome<T>>((resolve) => {
    timer = setTimeout(() => resolve({ status: 'pending', ms: Date.now() - started }), HUNG_AFTER_MS);
  });
  const settled = promise.then(
    (value): Outcome<T> => ({ status: 'resolved', value, ms: Date.now() - started }),
    (err: unknown): Outcome<T> => ({ status: 'rejected', err, ms: Date.now() - started }),
  );
  try {
    return await Promise.race([settled, hung]);
  } finally {
    clearTimeout(timer);
  }
}

async function silentPool(t: Test) {
  const proxy = await startSilentTcpProxy(t, db.url);
  const pool = createPool({ databaseUrl: proxy.url, statementTimeoutMs: STATEMENT_TIMEOUT_MS, queryTimeoutMs: QUERY_TIMEOUT_MS });
  // The proxy first: ending a pool whose connections are silent waits for goodbyes that never come.
  t.teardown(() => runEach('the proxied pool', () => proxy.close(), () => pool.end()));
  return { proxy, pool };
}

t.test('a query on a pooled connection that went silent fails within the bound as database unavailable, and the next query gets a fresh connection', async (t) => {
  const { proxy, pool } = await silentPool(t);
  const before = (await pool.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
  t.equal(proxy.silenceOpen(), 1, 'the idle pooled connection goes silent');

  const silent = await outcome(pool.query('select 2'));
  t.equal(silent.status, 'rejected', `the query fails instead of waiting on the silence (${silent.status} after ${silent.ms} ms)`);
  t.ok(silent.ms < SETTLED_WITHIN_MS, `within the bound (${silent.ms} ms)`);
  if (silent.status === 'rejected') t.equal(toZenovaError(silent.err).code, 'ZN_ERR_CP_DATABASE_UNAVAILABLE', 'mapped to the retryable 503');

  const next = await outcome(pool.query<{ pid: number }>('select pg_backend_pid() as pid'));
  t.equal(next.status, 'resolved', `the next query succeeds (${next.status} after ${next.ms} ms)`);
  if (next.status === 'resolved') t.not(next.value.rows[0]!.pid, before, 'on another backend');
  t.equal(proxy.accepted(), 2, 'over a new connection');
});

t.test('a client released without an error after its query went silent is cut, not handed out again', async (t) => {
  const { proxy, pool } = await silentPool(t);
  const client = await pool.connect();
  await client.query('begin');
  t.equal(proxy.silenceOpen(), 1);

  const silent = await outcome(client.query('select 1'));
  t.equal(silent.status, 'rejected', `the query in the transaction fails (${silent.status} after ${silent.ms} ms)`);
  // What the transaction helpers do next: a rollback, then a plain release.
  const rollback = await outcome(client.query('rollback'));
  t.equal(rollback.status, 'rejected', 'the rollback on the cut connection fails');
  t.notMatch(rollback.status === 'rejected' ? String(rollback.err) : '', /Query read timeout/, `at once, not after another bound (${rollback.ms} ms)`);
  t.ok(rollback.ms < QUERY_TIMEOUT_MS, `nor after waiting out the query timeout (${rollback.ms} ms)`);
  client.release();

  const next = await outcome(pool.query<{ one: number }>('select 1 as one'));
  t.equal(next.status, 'resolved', `the next query runs on a fresh connection (${next.status} after ${next.ms} ms)`);
  t.ok(next.ms < QUERY_TIMEOUT_MS, `without waiting behind the silent one (${next.ms} ms)`);
  t.equal(proxy.accepted(), 2);
});

t.test('an admin API call answers 503 DATABASE_UNAVAILABLE with Retry-After within the bound while its pooled connection is silent', async (t) => {
  const proxy = await startSilentTcpProxy(t, db.url);
  const settings = testSettings(proxy.url);
  const log = captureLogger(settings);
  const pool = createPool({ databaseUrl: proxy.url, logger: log.logger, statementTimeoutMs: STATEMENT_TIMEOUT_MS, queryTimeoutMs: QUERY_TIMEOUT_MS });
  const app = await buildApp({ settings, pool, logger: log.logger });
  t.teardown(() => runEach('the proxied app', () => app.close(), () => proxy.close(), () => pool.end()));
  const list = () => app.inject({ method: 'GET', url: '/api/v1/accounts', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  t.equal((await list()).statusCode, 200, 'answered while the database is reachable');
  t.ok(proxy.silenceOpen() >= 1, 'its pooled connections go silent');

  const during = await outcome(list());
  t.equal(during.status, 'resolved', `answered (${during.status} after ${during.ms} ms)`);
  t.ok(during.ms < SETTLED_WITHIN_MS, `within the bound (${during.ms} ms)`);
  if (during.status === 'resolved') {
    t.equal(during.value.statusCode, 503);
    t.equal(during.value.json().error.code, 'ZN_ERR_CP_DATABASE_UNAVAILABLE');
    t.equal(during.value.headers['retry-after'], '1', 'the caller is told when to come back');
  }
  t.equal((await list()).statusCode, 200, 'the next call is served on a fresh connection');
});
