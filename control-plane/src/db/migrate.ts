/**
 * Schema migrations: `NNNN_name.sql` files applied in order, each in its own transaction, recorded
 * with a SHA-256 of the file in `schema_migrations`. A session advisory lock makes replicas that
 * start together take turns, so each migration is applied exactly once. Start-up is refused when the
 * history no longer matches the files (an applied file changed or vanished, or the database is
 * newer than this binary): running against a schema we do not understand could corrupt data.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import type pino from 'pino';

/** Fixed key of the migration lock; shared by every zenova-control replica ("zenova" + 0001). */
export const MIGRATION_LOCK_KEY = BigInt('0x7a656e6f76610001').toString();

export const DEFAULT_MIGRATIONS_DIR = fileURLToPath(new URL('./migrations/', import.meta.url));

const FILE_PATTERN = /^(\d{4})_([a-z0-9_]+)\.sql$/;

// Waiting for another replica's migrations, and a migration itself, may take far longer than the
// pool's client-side query bound (db/pool.ts); this one only ends a connection silent for a day.
export const MIGRATION_QUERY_TIMEOUT_MS = 24 * 60 * 60 * 1000;

export class MigrationError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'MigrationError';
  }
}

export interface MigrationFile {
  version: number;
  name: string;
  file: string;
  sql: string;
  checksum: string;
}

interface AppliedRow { version: number; name: string; checksum: string }

const fileNameOf = (m: { version: number; name: string }): string => `${String(m.version).padStart(4, '0')}_${m.name}.sql`;

/** The migration files of `dir`, sorted by version; anything that looks wrong is refused. */
export async function readMigrations(dir: string): Promise<MigrationFile[]> {
  const entries = (await readdir(dir)).filter((f) => f.endsWith('.sql')).sort();
  const migrations: MigrationFile[] = [];
  for (const file of entries) {
    const match = FILE_PATTERN.exec(file);
    if (!match?.[1] || !match[2]) {
      throw new MigrationError(`migration file ${file} in ${dir} is not named NNNN_name.sql (lower-case name)`);
    }
    const version = Number(match[1]);
    const previous = migrations.at(-1);
    if (previous?.version === version) {
      throw new MigrationError(`migration files ${previous.file} and ${file} share version ${match[1]}`);
    }
    const bytes = await readFile(path.join(dir, file));
    migrations.push({
      version,
      name: match[2],
      file,
      sql: bytes.toString('utf8'),
      checksum: createHash('sha256').update(bytes).digest('hex'),
    });
  }
  return migrations;
}

/** Checks the recorded history against the files; returns the migrations still to apply. */
function pendingMigrations(files: MigrationFile[], applied: AppliedRow[], dir: string): MigrationFile[] {
  const byVersion = new Map(files.map((m) => [m.version, m]));
  const newestKnown = files.at(-1)?.version ?? 0;
  for (const row of applied) {
    const file = byVersion.get(row.version);
    if (!file) {
      if (row.version > newestKnown) {
        throw new MigrationError(
          `the database has migration ${fileNameOf(row)} which this zenova-control does not know; ` +
          'it was migrated by a newer version: run that version (or newer)',
        );
      }
      throw new MigrationError(`applied migration ${fileNameOf(row)} is missing from ${dir}`);
    }
    if (file.name !== row.name || file.checksum !== row.checksum) {
      throw new MigrationError(
        `migration file ${file.file} changed after it was applied as ${fileNameOf(row)} ` +
        `(checksum ${file.checksum.slice(0, 12)}…, recorded ${row.checksum.slice(0, 12)}…); ` +
        'applied migrations must never be edited: add a new migration instead',
      );
    }
  }
  const appliedVersions = new Set(applied.map((r) => r.version));
  const newestApplied = applied.reduce((max, r) => Math.max(max, r.version), 0);
  const pending = files.filter((m) => !appliedVersions.has(m.version));
  const outOfOrder = pending.find((m) => m.version < newestApplied);
  if (outOfOrder) {
    throw new MigrationError(
      `migration ${outOfOrder.file} is older than the newest applied migration (${String(newestApplied).padStart(4, '0')}); ` +
      'new migrations must get a higher number',
    );
  }
  return pending;
}

export async function migrate(
  pool: pg.Pool,
  options: { dir?: string; logger?: pino.Logger } = {},
): Promise<{ applied: string[] }> {
  const dir = options.dir ?? DEFAULT_MIGRATIONS_DIR;
  const log = options.logger;
  const files = await readMigrations(dir);
  const client = await pool.connect();
  const run = <R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> =>
    client.query<R>({ text, values, query_timeout: MIGRATION_QUERY_TIMEOUT_MS } as pg.QueryConfig);
  try {
    // Waiting for another replica's migrations, and the migrations themselves, may take longer than
    // the pool's statement timeout allows ordinary queries.
    await run(`select set_config('statement_timeout', '0', false)`);
    await run('select pg_advisory_lock($1::bigint)', [MIGRATION_LOCK_KEY]);
    await run(`
      create table if not exists schema_migrations (
        version    integer primary key,
        name       text not null,
        checksum   text not null,
        applied_at timestamptz not null default now()
      )`);
    const { rows } = await run<AppliedRow>('select version, name, checksum from schema_migrations order by version');
    const pending = pendingMigrations(files, rows, dir);
    const applied: string[] = [];
    for (const migration of pending) {
      log?.info({ migration: migration.file }, 'applying database migration');
      try {
        await run('begin');
        // Simple-query protocol (no parameters), so one file may hold many statements.
        await run(migration.sql);
        await run('insert into schema_migrations (version, name, checksum) values ($1, $2, $3)', [
          migration.version, migration.name, migration.checksum,
        ]);
        await run('commit');
      } catch (err) {
        await run('rollback').catch(() => undefined);
        throw new MigrationError(`migration ${migration.file} failed: ${(err as Error).message}`, { cause: err });
      }
      applied.push(migration.file);
    }
    if (applied.length > 0) log?.info({ applied }, 'database migrations applied');
    else log?.debug('database schema is up to date');
    return { applied };
  } finally {
    // Destroying the session frees the advisory lock and the session setting above in one go, and
    // keeps a session in an unknown state out of the pool.
    client.release(true);
  }
}
