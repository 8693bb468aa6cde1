// A new month's partition is made without waiting for readers of request_records: a backup
// (pg_dump) or a long report holds a share lock on it for its whole run, and `CREATE TABLE …
// PARTITION OF` waited for it behind an ACCESS EXCLUSIVE request that every later reader and
// insert of every replica then queued behind. The partition is created apart and attached, and
// the month after a record's is made ahead.
import t from 'tap';
import pg from 'pg';
import type { RequestRecord } from '../../../proto/src/index.js';
import { ingestRecords } from '../../../control-plane/src/records/record-ingestion.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { migratedPool } from '../nodes-harness.js';
import { record } from '../../edge-node/spool/spool-helpers.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
// Ingestion gives up on a lock after 5 s instead of PostgreSQL's default of waiting for ever: a
// wait behind the reader below fails the test rather than hanging it.
const ingestPool = new pg.Pool({ connectionString: db.url, max: 2, options: '-c lock_timeout=5000' });
// The test database's teardown ends its connections, idle ones of this pool too.
ingestPool.on('error', () => undefined);
t.teardown(() => ingestPool.end());
const NODE = { nodeId: 'node-partition-test-01', nodeName: 'edge-p' };

const at = (id: string, receivedAt: number): RequestRecord => record(id, { nodeId: NODE.nodeId, receivedAt, finishedAt: receivedAt + 50 });

async function partitionOf(requestId: string): Promise<string | undefined> {
  const { rows } = await pool.query<{ part: string }>('select tableoid::regclass::text as part from request_records where request_id = $1', [requestId]);
  return rows[0]?.part;
}

async function partitionExists(name: string): Promise<boolean> {
  const { rows } = await pool.query('select 1 from pg_inherits i join pg_class c on c.oid = i.inhrelid where c.relname = $1', [name]);
  return rows.length === 1;
}

t.test("a new month's first records are ingested while a reader holds request_records open, and other readers are not held up", async (t) => {
  // A backup's view: one transaction that has read request_records and stays open.
  const reader = await pool.connect();
  t.teardown(async () => {
    await reader.query('rollback').catch(() => undefined);
    reader.release();
  });
  await reader.query('begin isolation level repeatable read');
  await reader.query('select count(*) from request_records');

  const result = await ingestRecords(ingestPool, NODE, [at('month-first-0', Date.UTC(2031, 4, 1, 0, 0, 1))]);
  t.equal(result.accepted, 1, 'ingested with the reader still open');
  t.equal(await partitionOf('month-first-0'), 'request_records_p203105');

  // The list the console reads, from another connection, while the reader is still open.
  const { rows } = await ingestPool.query<{ n: string }>("select count(*) as n from request_records where request_id like 'month-first-%'");
  t.equal(rows[0]?.n, '1');
  await reader.query('commit');
});

t.test("the month after a record's gets its partition ahead, with the parent's primary key and indexes", async (t) => {
  await ingestRecords(ingestPool, NODE, [at('ahead-0', Date.UTC(2032, 10, 15))]);
  t.ok(await partitionExists('request_records_p203212'), 'December made with November');
  const { rows } = await pool.query<{ n: string }>(
    "select count(*) as n from pg_indexes where tablename = 'request_records_p203212'",
  );
  const parent = await pool.query<{ n: string }>(
    "select count(*) as n from pg_indexes where tablename = 'request_records'",
  );
  t.equal(rows[0]?.n, parent.rows[0]?.n, 'every index of request_records, its primary key included');
  // A December record goes straight in, and the same request id is still ingested once.
  const dec = at('ahead-1', Date.UTC(2032, 11, 1));
  t.equal((await ingestRecords(ingestPool, NODE, [dec])).accepted, 1);
  t.equal(await partitionOf('ahead-1'), 'request_records_p203212');
  t.equal((await ingestRecords(ingestPool, NODE, [dec])).duplicates, 1);
});

t.test('records of the last month a record may carry get their partition, and no month past it is made', async (t) => {
  const result = await ingestRecords(ingestPool, NODE, [at('last-month-0', Date.UTC(9999, 11, 31, 23, 59, 59))]);
  t.equal(result.accepted, 1);
  t.equal(await partitionOf('last-month-0'), 'request_records_p999912');
});
