import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import t from 'tap';
import { startPostgres, testDatabase } from '../fixtures/postgres.js';
import { startProcess, tsEntry } from '../fixtures/processes.js';

async function query<R extends pg.QueryResultRow>(url: string, sql: string, params: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    return (await client.query<R>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

/** The throwaway cluster's temp dir: the parent of its data directory. */
async function clusterDirOf(url: string): Promise<string> {
  const [row] = await query<{ data_directory: string }>(url, 'show data_directory');
  return path.dirname(row!.data_directory);
}

// The throwaway-cluster path is what this file tests; a caller's shared server must not leak in.
delete process.env.ZENOVA_TEST_DATABASE_URL;

t.test('startPostgres gives a working database and removes its cluster dir on stop', async (t) => {
  const db = await startPostgres();
  let stopped = false;
  t.teardown(() => (stopped ? undefined : db.stop()));
  const clusterDir = await clusterDirOf(db.url);
  t.ok(existsSync(clusterDir), 'the cluster lives in a temp dir');
  t.match(db.url, /^postgres:\/\/zenova@127\.0\.0\.1:\d+\/zenova$/);

  await query(db.url, 'create table t (id int primary key, v text)');
  await query(db.url, `insert into t values (1, 'héllo')`);
  t.same(await query(db.url, 'select v, current_database() as db from t'), [{ v: 'héllo', db: 'zenova' }]);

  await db.stop();
  stopped = true;
  t.notOk(existsSync(clusterDir), 'cluster dir removed');
  await t.rejects(query(db.url, 'select 1'), 'the server is gone');
  await db.stop(); // a second stop is harmless
});

t.test('with ZENOVA_TEST_DATABASE_URL set, testDatabase creates and drops a separate database in that server', async (t) => {
  const server = await testDatabase(t);
  const serverDir = await clusterDirOf(server.url);
  let url = '';
  let name = '';
  t.teardown(() => { delete process.env.ZENOVA_TEST_DATABASE_URL; });
  process.env.ZENOVA_TEST_DATABASE_URL = server.url;

  await t.test('a test using the shared server', async (tt) => {
    const db = await testDatabase(tt);
    url = db.url;
    name = new URL(db.url).pathname.slice(1);
    tt.match(name, /^zenova_test_[0-9a-f]+$/);
    tt.equal(new URL(db.url).port, new URL(server.url).port, 'same server');
    tt.equal(await clusterDirOf(db.url), serverDir, 'no new cluster');
    await query(db.url, 'create table marker (id int)');
    tt.same(await query(db.url, 'select current_database() as db'), [{ db: name }]);
    // A connection still open at teardown (closed only by the outer test) must not stop the drop.
    const straggler = new pg.Client({ connectionString: db.url });
    straggler.on('error', () => undefined);
    await straggler.connect();
    t.teardown(() => straggler.end().catch(() => undefined));
  });

  t.ok(url);
  const rows = await query<{ datname: string }>(server.url, 'select datname from pg_database where datname = $1', [name]);
  t.same(rows, [], 'the separate database is dropped after its test');
});

t.test('a server that fails to start reports its log tail and leaves no cluster dir', async (t) => {
  const binDir = mkdtempSync(path.join('/tmp', 'zenova-fake-pg-bin-'));
  t.teardown(() => rmSync(binDir, { recursive: true, force: true }));
  chmodSync(binDir, 0o755); // the unprivileged server user must reach it when tests run as root
  symlinkSync(path.join(realBinDir(), 'initdb'), path.join(binDir, 'initdb'));
  writeFileSync(path.join(binDir, 'postgres'), '#!/bin/sh\necho "FATAL:  pretend misconfiguration of $2" >&2\nexit 1\n', { mode: 0o755 });
  const previous = process.env.ZENOVA_PG_BIN;
  process.env.ZENOVA_PG_BIN = binDir;
  t.teardown(() => {
    if (previous === undefined) delete process.env.ZENOVA_PG_BIN;
    else process.env.ZENOVA_PG_BIN = previous;
  });
  const failure = await startPostgres().then(() => undefined, (err: Error) => err);
  t.match(failure?.message, /postgres exited during start-up \(code 1[\s\S]*FATAL: {2}pretend misconfiguration of \//);
  const dataDir = /misconfiguration of (\S+)/.exec(failure?.message ?? '')?.[1];
  t.ok(dataDir && !existsSync(path.dirname(dataDir)), 'temp dir removed');
});

t.test('a test process that exits without stop() takes its server down with it', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zenova-pg-exit-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const script = path.join(dir, 'leaky.mts'); // .mts: ESM (top-level await) outside any package
  const fixture = path.resolve(import.meta.dirname, '../fixtures/postgres.ts');
  writeFileSync(script, `import { startPostgres } from ${JSON.stringify(fixture)};\nimport pg from ${JSON.stringify(createRequire(import.meta.url).resolve('pg'))};\nconst db = await startPostgres();\nconst client = new pg.Client(db.url);\nawait client.connect();\nconst { rows } = await client.query('show data_directory');\nawait client.end();\nconsole.log('DIR=' + rows[0].data_directory);\nconsole.log('URL=' + db.url);\n`);
  const child = await startProcess({ name: 'leaky', ...tsEntry(script), env: { ZENOVA_TEST_DATABASE_URL: undefined }, t });
  const line = await child.waitForLine(/^URL=/, 40_000);
  const dataDir = (await child.waitForLine(/^DIR=/)).slice('DIR='.length);
  t.same(await child.exited, { code: 0, signal: null });
  t.notOk(existsSync(path.dirname(dataDir)), 'its cluster dir is removed');
  await t.rejects(query(line.slice('URL='.length), 'select 1'), 'the server went down with its test process');
});

function realBinDir(): string {
  for (const candidate of [process.env.ZENOVA_PG_BIN, '/usr/lib/postgresql/15/bin']) {
    if (candidate && existsSync(path.join(candidate, 'initdb'))) return candidate;
  }
  const root = '/usr/lib/postgresql';
  const newest = readdirSync(root).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a))[0];
  return path.join(root, newest!, 'bin');
}
