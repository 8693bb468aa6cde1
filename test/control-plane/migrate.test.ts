import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import t from 'tap';
import { MIGRATION_LOCK_KEY, MigrationError, migrate } from '../../control-plane/src/db/migrate.js';
import { createPool } from '../../control-plane/src/db/pool.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { captureLogger, freshDatabase } from './helpers.js';

interface HasTeardown { teardown(fn: () => unknown): void }

const server = await testDatabase(t);

/** A fresh database and a pool on it, both gone at teardown. */
async function freshPool(tt: HasTeardown): Promise<{ url: string; pool: pg.Pool }> {
  const url = await freshDatabase(tt, server.url);
  const pool = createPool({ databaseUrl: url });
  tt.teardown(() => pool.end());
  return { url, pool };
}

/** A temp migrations dir holding `files` (name → SQL). */
function migrationsDir(tt: HasTeardown, files: Record<string, string>): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zenova-migrations-'));
  tt.teardown(() => rmSync(dir, { recursive: true, force: true }));
  for (const [name, sql] of Object.entries(files)) writeFileSync(path.join(dir, name), sql);
  return dir;
}

const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');

const BASE = {
  '0001_accounts.sql': 'create table accounts (id serial primary key, name text not null);',
  // Depends on 0001: fails unless applied after it.
  '0002_account_email.sql': 'alter table accounts add column email text;\ncreate index accounts_email on accounts (email);',
  '0010_audit.sql': 'create table audit (id serial primary key, account_id integer references accounts (id));',
};

t.test('migrations apply in version order, are recorded with checksums, and a second run applies nothing', async (t) => {
  const { pool } = await freshPool(t);
  const dir = migrationsDir(t, BASE);
  const first = await migrate(pool, { dir });
  t.same(first.applied, ['0001_accounts.sql', '0002_account_email.sql', '0010_audit.sql']);

  const { rows } = await pool.query<{ version: number; name: string; checksum: string; applied_at: Date }>(
    'select version, name, checksum, applied_at from schema_migrations order by version',
  );
  t.same(rows.map((r) => [r.version, r.name, r.checksum]), [
    [1, 'accounts', sha256(BASE['0001_accounts.sql'])],
    [2, 'account_email', sha256(BASE['0002_account_email.sql'])],
    [10, 'audit', sha256(BASE['0010_audit.sql'])],
  ]);
  t.ok(rows.every((r) => r.applied_at instanceof Date), 'applied_at recorded');

  const second = await migrate(pool, { dir });
  t.same(second.applied, [], 'nothing left to apply');

  writeFileSync(path.join(dir, '0011_audit_note.sql'), 'alter table audit add column note text;');
  const third = await migrate(pool, { dir });
  t.same(third.applied, ['0011_audit_note.sql'], 'only the new migration');
});

t.test('the shipped migrations create exactly one installation row, kept across runs', async (t) => {
  const { pool } = await freshPool(t);
  const result = await migrate(pool);
  t.ok(result.applied.includes('0001_installation.sql'));
  const before = await pool.query<{ id: string }>('select id from installation');
  t.equal(before.rows.length, 1);
  t.same((await migrate(pool)).applied, []);
  const after = await pool.query<{ id: string }>('select id from installation');
  t.same(after.rows, before.rows, 'same single row');
  await t.rejects(pool.query('insert into installation default values'), /duplicate key|unique/, 'a second row is impossible');
});

t.test('two migrators racing on one database apply each migration exactly once', async (t) => {
  const { url, pool: observer } = await freshPool(t);
  const GATE = 424242;
  const dir = migrationsDir(t, {
    '0001_counter.sql': 'create table applied_log (migration text not null);\ninsert into applied_log values (\'0001\');',
    // Blocks on a lock the test holds, so the second migrator is sure to arrive while the first is busy.
    '0002_gated.sql': `select pg_advisory_xact_lock(${GATE});\ncreate table gated (id int);\ninsert into applied_log values ('0002');`,
    '0003_more.sql': 'create table more (id int);\ninsert into applied_log values (\'0003\');',
  });
  const gate = new pg.Client({ connectionString: url });
  await gate.connect();
  t.teardown(() => gate.end());
  await gate.query('select pg_advisory_lock($1)', [GATE]);

  const poolA = createPool({ databaseUrl: url });
  const poolB = createPool({ databaseUrl: url });
  t.teardown(() => poolA.end());
  t.teardown(() => poolB.end());
  const a = migrate(poolA, { dir });
  const b = migrate(poolB, { dir });
  // Both are now stuck: one inside 0002 on the gate, the other on the migration lock.
  await waitFor(async () => {
    const { rows } = await observer.query<{ n: number }>(
      `select count(*)::int as n from pg_locks where locktype = 'advisory' and not granted`,
    );
    return rows[0]!.n === 2;
  }, { what: 'both migrators to wait on advisory locks' });
  await gate.query('select pg_advisory_unlock($1)', [GATE]);

  const [ra, rb] = await Promise.all([a, b]);
  const all = [...ra.applied, ...rb.applied].sort();
  t.same(all, ['0001_counter.sql', '0002_gated.sql', '0003_more.sql'], 'each migration applied by exactly one migrator');
  t.ok(ra.applied.length === 0 || rb.applied.length === 0, 'the one that waited found nothing to do');
  const log = await observer.query<{ migration: string }>('select migration from applied_log order by migration');
  t.same(log.rows.map((r) => r.migration), ['0001', '0002', '0003'], 'each migration body ran once');
});

t.test('a migration file changed after it was applied stops migration, naming the file', async (t) => {
  const { pool } = await freshPool(t);
  const dir = migrationsDir(t, BASE);
  await migrate(pool, { dir });
  writeFileSync(path.join(dir, '0002_account_email.sql'), `${BASE['0002_account_email.sql']}\n-- a harmless-looking edit`);
  writeFileSync(path.join(dir, '0011_new.sql'), 'create table newer (id int);');
  const err = await migrate(pool, { dir }).catch((e: unknown) => e);
  t.type(err, MigrationError);
  t.match((err as Error).message, /0002_account_email\.sql changed after it was applied/);
  const { rows } = await pool.query(`select to_regclass('newer') is not null as exists`);
  t.equal(rows[0].exists, false, 'nothing else was applied');
});

t.test('an applied migration whose file went missing stops migration, naming it', async (t) => {
  const { pool } = await freshPool(t);
  const dir = migrationsDir(t, BASE);
  await migrate(pool, { dir });
  unlinkSync(path.join(dir, '0001_accounts.sql'));
  await t.rejects(migrate(pool, { dir }), { name: 'MigrationError', message: /0001_accounts\.sql is missing/ });
});

t.test('a database migrated by a newer zenova-control is refused', async (t) => {
  const { pool } = await freshPool(t);
  const newer = migrationsDir(t, { ...BASE, '0042_future.sql': 'create table future (id int);' });
  await migrate(pool, { dir: newer });
  const current = migrationsDir(t, BASE);
  await t.rejects(migrate(pool, { dir: current }), { name: 'MigrationError', message: /0042_future\.sql.*newer version/ });
});

t.test('a new migration numbered below an applied one is refused', async (t) => {
  const { pool } = await freshPool(t);
  const dir = migrationsDir(t, BASE);
  await migrate(pool, { dir });
  writeFileSync(path.join(dir, '0005_late.sql'), 'create table late (id int);');
  await t.rejects(migrate(pool, { dir }), { name: 'MigrationError', message: /0005_late\.sql is older than the newest applied migration \(0010\)/ });
});

t.test('a failing migration is rolled back entirely and named, and can be applied once fixed', async (t) => {
  const { pool } = await freshPool(t);
  const dir = migrationsDir(t, {
    '0001_ok.sql': 'create table ok (id int);',
    '0002_broken.sql': 'create table half (id int);\nselect 1 / 0;',
  });
  await t.rejects(migrate(pool, { dir }), { name: 'MigrationError', message: /0002_broken\.sql failed: division by zero/ });
  const state = await pool.query(`select to_regclass('ok') is not null as ok, to_regclass('half') is not null as half`);
  t.same(state.rows[0], { ok: true, half: false }, '0001 committed, 0002 left no trace');
  const recorded = await pool.query<{ version: number }>('select version from schema_migrations order by version');
  t.same(recorded.rows.map((r) => r.version), [1]);

  writeFileSync(path.join(dir, '0002_broken.sql'), 'create table half (id int);');
  t.same((await migrate(pool, { dir })).applied, ['0002_broken.sql']);
});

t.test('migration files with malformed names are refused', async (t) => {
  const { pool } = await freshPool(t);
  await t.rejects(migrate(pool, { dir: migrationsDir(t, { '1_short.sql': 'select 1;' }) }), { message: /1_short\.sql.*NNNN_name\.sql/ });
  await t.rejects(
    migrate(pool, { dir: migrationsDir(t, { '0001_a.sql': 'select 1;', '0001_b.sql': 'select 1;' }) }),
    { message: /0001_a\.sql and 0001_b\.sql share version 0001/ },
  );
});

t.test('a replica waiting for another one\'s migrations says so, naming the holder, and goes on once it is free', async (t) => {
  const { url } = await freshPool(t);
  const holder = new pg.Client({ connectionString: url, application_name: 'zenova-control-other' });
  await holder.connect();
  t.teardown(() => holder.end());
  await holder.query('select pg_advisory_lock($1::bigint)', [MIGRATION_LOCK_KEY]);
  const log = captureLogger({ logLevel: 'info' });
  const pool = createPool({ databaseUrl: url });
  t.teardown(() => pool.end());
  const run = migrate(pool, { dir: migrationsDir(t, BASE), logger: log.logger });
  const warning = await waitFor(() => log.lines().find((l) => l.msg === 'another control plane is applying database migrations (it holds the migration lock); waiting for it to finish'), { what: 'the waiting warning' });
  t.match(warning, { level: 40, holder: { applicationName: 'zenova-control-other' } });
  await holder.query('select pg_advisory_unlock($1::bigint)', [MIGRATION_LOCK_KEY]);
  t.same((await run).applied, Object.keys(BASE));
  t.ok(log.lines().some((l) => l.msg === 'the migration lock is free; going on'));
});

t.test('a migration whose table stays locked by a long reader gives up the lock queue, says so, and is applied once the reader is done', async (t) => {
  const { url, pool } = await freshPool(t);
  const dir = migrationsDir(t, BASE);
  await migrate(pool, { dir });
  const reader = new pg.Client({ connectionString: url });
  await reader.connect();
  t.teardown(() => reader.end());
  await reader.query('begin');
  await reader.query('select count(*) from accounts');
  const more = migrationsDir(t, { ...BASE, '0011_account_phone.sql': 'alter table accounts add column phone text;' });
  const log = captureLogger({ logLevel: 'info' });
  const run = migrate(pool, { dir: more, logger: log.logger, lockTimeoutMs: 200 });
  const warned = await waitFor(() => log.lines().find((l) => typeof l.msg === 'string' && l.msg.startsWith('a table the migration changes stayed locked')), { what: 'the lock-timeout warning' });
  const { rows: [readerPid] } = await reader.query<{ pid: number }>('select pg_backend_pid() as pid');
  t.match(warned, { level: 40, migration: '0011_account_phone.sql', attempt: 1, lockTimeoutMs: 200, nextLockTimeoutMs: 200 }, 'the reader was there first: the wait stays short');
  t.same((warned.blockers as Array<{ pid: number }>).map((b) => b.pid), [readerPid!.pid], 'the blocking session is named');
  t.notOk(JSON.stringify(warned).includes('select count'), 'never its query text');
  // Between attempts the migration is not in the lock queue: a writer is not held behind it.
  await waitFor(async () => {
    const { rows } = await pool.query<{ n: number }>(`select count(*)::int as n from pg_locks where relation = 'accounts'::regclass and not granted`);
    return rows[0]!.n === 0 || undefined;
  }, { what: 'no session waiting on accounts' });
  await reader.query('commit');
  t.same((await run).applied, ['0011_account_phone.sql']);
  const { rows } = await pool.query<{ n: number }>(`select count(*)::int as n from information_schema.columns where table_name = 'accounts' and column_name = 'phone'`);
  t.equal(rows[0]!.n, 1, 'applied once the reader finished');
});

t.test('a migration that cannot see the sessions blocking it (its role at its connection limit) keeps its waits short', async (t) => {
  const { url } = await freshPool(t);
  // The control plane's role may open one session: migrate holds it, so the look at the blockers is refused.
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  t.teardown(() => admin.end());
  const role = `zn_limited_${process.pid}`;
  await admin.query(`create role ${role} login password 'limited' connection limit 1`);
  t.teardown(async () => {
    await admin.query(`drop owned by ${role}`);
    await admin.query(`drop role ${role}`);
  });
  await admin.query(`grant all on schema public to ${role}`);
  const limitedUrl = new URL(url);
  limitedUrl.username = role;
  limitedUrl.password = 'limited';
  const pool = createPool({ databaseUrl: limitedUrl.toString() });
  t.teardown(() => pool.end());
  const dir = migrationsDir(t, BASE);
  await migrate(pool, { dir });
  // migrate closes its session on the way out (it changed the session's statement timeout); the
  // server counts that backend against the role's one connection until it has exited, so the next
  // migrate could be refused at its connect if it came first.
  await waitFor(async () => {
    const { rows } = await admin.query<{ n: number }>('select count(*)::int as n from pg_stat_activity where usename = $1', [role]);
    return rows[0]!.n === 0 ? true : undefined;
  }, { what: `no session of ${role} left` });
  // A reader there before the migration first tries, as a backup would be.
  await admin.query('begin');
  await admin.query('select count(*) from accounts');
  const more = migrationsDir(t, { ...BASE, '0011_account_phone.sql': 'alter table accounts add column phone text;' });
  const log = captureLogger({ logLevel: 'info' });
  const run = migrate(pool, { dir: more, logger: log.logger, lockTimeoutMs: 200, retryDelaysMs: [20] });
  const warnings = () => log.lines().filter((l) => typeof l.msg === 'string' && l.msg.startsWith('a table the migration changes stayed locked')) as Array<{ blockers: unknown[]; msg: string; nextLockTimeoutMs: number }>;
  await waitFor(() => (warnings().length >= 3 ? true : undefined), { what: 'three lock-timeout warnings' });
  await admin.query('commit');
  t.same((await run).applied, ['0011_account_phone.sql']);
  const seen = warnings();
  t.same(seen.map((w) => w.blockers), seen.map(() => []), 'the blocking session could not be seen');
  t.same(seen.map((w) => w.nextLockTimeoutMs), seen.map(() => 200), 'the wait stayed short: unseen blockers are not taken for new ones');
  t.match(seen[0]!.msg, /could not be seen/);
});

t.test('a migration starved by readers that overlap without a gap waits longer each time the sessions blocking it are new, and is applied', async (t) => {
  const { url, pool } = await freshPool(t);
  const dir = migrationsDir(t, BASE);
  await migrate(pool, { dir });
  // Two readers, each holding the table 600 ms and starting again at once, half a cycle apart: at
  // any moment one of them holds it for 300 ms more or longer, past the 200 ms a wait starts at.
  let reading = true;
  const holding = new Set<number>();
  const readers = [0, 300].map(async (offsetMs) => {
    const reader = new pg.Client({ connectionString: url, application_name: `reader-${offsetMs}` });
    await reader.connect();
    try {
      await new Promise((resolve) => setTimeout(resolve, offsetMs));
      const until = Date.now() + 30_000;
      while (reading && Date.now() < until) {
        await reader.query('begin');
        await reader.query('select count(*) from accounts');
        holding.add(offsetMs);
        await new Promise((resolve) => setTimeout(resolve, 600));
        await reader.query('commit');
      }
    } finally {
      await reader.end();
    }
  });
  const more = migrationsDir(t, { ...BASE, '0011_account_phone.sql': 'alter table accounts add column phone text;' });
  const log = captureLogger({ logLevel: 'info' });
  try {
    // The migration starts once both readers hold the table (their connecting takes a while).
    await waitFor(() => (holding.size === 2 ? true : undefined), { what: 'both readers holding the table' });
    const readersGaveUp = Promise.all(readers).then(() => 'the readers stopped first');
    const applied = migrate(pool, { dir: more, logger: log.logger, lockTimeoutMs: 200, retryDelaysMs: [100] }).then((r) => r.applied);
    t.same(await Promise.race([applied, readersGaveUp]), ['0011_account_phone.sql'], 'applied while the readers went on');
  } finally {
    reading = false;
    await Promise.all(readers);
  }
  const warnings = log.lines().filter((l) => typeof l.msg === 'string' && l.msg.startsWith('a table the migration changes stayed locked')) as Array<{ blockers: Array<{ applicationName: string }>; lockTimeoutMs: number; nextLockTimeoutMs: number }>;
  t.ok(warnings.length >= 1, 'it could not get the table at once');
  t.ok(warnings.every((w) => w.blockers.every((b) => b.applicationName.startsWith('reader-'))), 'each names the readers blocking it');
  t.ok(warnings.some((w) => w.nextLockTimeoutMs > w.lockTimeoutMs), 'the wait grew once the readers blocking it were new ones');
});

t.test('a backup that begins after the migration first tried, and keeps blocking it, soon gets only short waits again', async (t) => {
  const { url, pool } = await freshPool(t);
  const dir = migrationsDir(t, BASE);
  await migrate(pool, { dir });
  // A short reader makes the first attempt wait; the backup starts once the migration is waiting.
  const reader = new pg.Client({ connectionString: url, application_name: 'short-reader' });
  const backup = new pg.Client({ connectionString: url, application_name: 'backup' });
  await reader.connect();
  await backup.connect();
  t.teardown(() => Promise.all([reader.end(), backup.end()]));
  await reader.query('begin');
  await reader.query('select count(*) from accounts');
  const more = migrationsDir(t, { ...BASE, '0011_account_phone.sql': 'alter table accounts add column phone text;' });
  const log = captureLogger({ logLevel: 'info' });
  const isWarning = (l: Record<string, unknown>) => typeof l.msg === 'string' && l.msg.startsWith('a table the migration changes stayed locked');
  const run = migrate(pool, { dir: more, logger: log.logger, lockTimeoutMs: 200, retryDelaysMs: [100] });
  await waitFor(() => log.lines().some(isWarning) || undefined, { what: 'the first lock-timeout warning' });
  await backup.query('begin');
  await backup.query('select count(*) from accounts');
  await reader.query('commit');
  const warnings = () => log.lines().filter(isWarning) as Array<{ blockers: Array<{ applicationName: string }>; lockTimeoutMs: number; nextLockTimeoutMs: number }>;
  // Enough attempts for the backup to have blocked the migration for more than 4 waits of 200 ms.
  await waitFor(() => warnings().filter((w) => w.blockers.some((b) => b.applicationName === 'backup')).length >= 6 || undefined, { what: 'six waits behind the backup', timeoutMs: 30_000 });
  await backup.query('commit');
  t.same((await run).applied, ['0011_account_phone.sql']);
  const behindBackup = warnings().filter((w) => w.blockers.some((b) => b.applicationName === 'backup'));
  t.ok(Math.max(...behindBackup.map((w) => w.lockTimeoutMs)) <= 1600, 'the wait grew a little while the backup was new');
  t.same(behindBackup.slice(-2).map((w) => w.lockTimeoutMs), [200, 200], 'then it is back to its start, and stays there');
});
