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

/**
 * How long one migration statement may wait for a table lock before its transaction is rolled back
 * and tried again. Waiting behind a long reader (a backup) without bound queued every ingest and
 * records read of the other replicas behind the migration (PostgreSQL's lock queue is FIFO).
 */
export const MIGRATION_LOCK_TIMEOUT_MS = 5_000;
/**
 * The most a migration's lock wait grows to. Readers that overlap without a gap, each longer than
 * the wait, starved it: at every attempt one of them still held the table. When every session
 * blocking an attempt is new (it began after the migration first tried, and has not blocked it for
 * LONG_BLOCKER_WAITS waits yet: the queue moves), the next attempt waits twice as long. A session
 * that was there before, or that keeps blocking it (a backup that began meanwhile), sets the wait
 * back to its start, so writers are not queued behind the migration for long while it lasts.
 */
export const MIGRATION_LOCK_TIMEOUT_MAX_MS = 5 * 60_000;
/** A session blocking a migration for this many of its first waits (4 × 5 s) counts as long-standing. */
const LONG_BLOCKER_WAITS = 4;
/** Pauses between attempts of a migration that could not get its locks: doubling up to the last. */
const LOCK_RETRY_DELAYS_MS = [1_000, 2_000, 4_000, 8_000, 15_000, 30_000];
/** How often a replica waiting for another's migrations says so again. */
export const MIGRATION_WAIT_LOG_MS = 30_000;

const LOCK_NOT_AVAILABLE = '55P03';

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
  options: { dir?: string; logger?: pino.Logger; /** Tests shorten them. */ lockTimeoutMs?: number; retryDelaysMs?: readonly number[] } = {},
): Promise<{ applied: string[] }> {
  const dir = options.dir ?? DEFAULT_MIGRATIONS_DIR;
  const log = options.logger;
  const baseLockTimeoutMs = Math.trunc(options.lockTimeoutMs ?? MIGRATION_LOCK_TIMEOUT_MS);
  const retryDelaysMs = options.retryDelaysMs ?? LOCK_RETRY_DELAYS_MS;
  const files = await readMigrations(dir);
  const client = await pool.connect();
  const run = <R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> =>
    client.query<R>({ text, values, query_timeout: MIGRATION_QUERY_TIMEOUT_MS } as pg.QueryConfig);
  try {
    // Waiting for another replica's migrations, and the migrations themselves, may take longer than
    // the pool's statement timeout allows ordinary queries.
    await run(`select set_config('statement_timeout', '0', false)`);
    await takeMigrationLock(run, log);
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
    const started = Date.now();
    const { rows: [self] } = await run<{ pid: number }>('select pg_backend_pid() as pid');
    for (const migration of pending) {
      log?.info({ migration: migration.file }, 'applying database migration');
      let lockTimeoutMs = baseLockTimeoutMs;
      // The database's clock, as the blockers' transaction starts are.
      const { rows: [first] } = await run<{ at: Date }>('select clock_timestamp() as at');
      // When each blocking transaction (pid and start) was first seen blocking this migration.
      const firstSeen = new Map<string, number>();
      for (let attempt = 0; ; attempt += 1) {
        const watch = watchBlockers(pool, self!.pid, lockTimeoutMs);
        try {
          await run('begin');
          await run(`set local lock_timeout = ${lockTimeoutMs}`);
          // Simple-query protocol (no parameters), so one file may hold many statements.
          await run(migration.sql);
          await run('insert into schema_migrations (version, name, checksum) values ($1, $2, $3)', [
            migration.version, migration.name, migration.checksum,
          ]);
          await run('commit');
          break;
        } catch (err) {
          await run('rollback').catch(() => undefined);
          const code = (err as { code?: unknown }).code;
          if (code === LOCK_NOT_AVAILABLE && Date.now() - started < MIGRATION_QUERY_TIMEOUT_MS) {
            const blockers = await watch.stop();
            const delayMs = retryDelaysMs[Math.min(attempt, retryDelaysMs.length - 1)]!;
            const waitedMs = lockTimeoutMs;
            const firstAt = first!.at.getTime();
            const now = Date.now();
            // Blockers it could not see (the check failed, or they have no session row) count as long-standing:
            // doubling the wait on an empty list would queue every query on the table behind it for minutes.
            const longStanding = blockers.length === 0 || blockers.some((b) => {
              const seen = firstSeen.get(`${b.pid}@${b.transactionStart}`) ?? now;
              firstSeen.set(`${b.pid}@${b.transactionStart}`, seen);
              return b.transactionStart === null || Date.parse(b.transactionStart) < firstAt || now - seen >= LONG_BLOCKER_WAITS * baseLockTimeoutMs;
            });
            lockTimeoutMs = longStanding ? baseLockTimeoutMs : Math.min(lockTimeoutMs * 2, Math.max(MIGRATION_LOCK_TIMEOUT_MAX_MS, baseLockTimeoutMs));
            log?.warn(
              { migration: migration.file, attempt: attempt + 1, lockTimeoutMs: waitedMs, blockers, retryInMs: delayMs, nextLockTimeoutMs: lockTimeoutMs },
              `a table the migration changes stayed locked by other sessions for ${waitedMs} ms (a long query or backup): rolled back so queries queued behind it go on; trying again` +
                (longStanding
                  ? blockers.length === 0
                    ? ' as briefly, since the sessions blocking it could not be seen'
                    : ' as briefly, since a session blocking it was there before the migration first tried, or keeps blocking it'
                  : `, waiting up to ${lockTimeoutMs} ms, since every session blocking it is new`),
            );
            await new Promise((resolve) => setTimeout(resolve, delayMs));
            continue;
          }
          throw new MigrationError(`migration ${migration.file} failed: ${(err as Error).message}`, { cause: err });
        } finally {
          await watch.stop();
        }
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

type Run = <R extends pg.QueryResultRow>(text: string, values?: unknown[]) => Promise<pg.QueryResult<R>>;

/**
 * The session lock that makes replicas take turns. When another session holds it (a replica
 * migrating, or the backend of one that died and is not gone yet), a warning names the holder
 * before waiting, and again every MIGRATION_WAIT_LOG_MS: a replica that waited silently looked hung.
 */
async function takeMigrationLock(run: Run, log: pino.Logger | undefined): Promise<void> {
  const { rows } = await run<{ taken: boolean }>('select pg_try_advisory_lock($1::bigint) as taken', [MIGRATION_LOCK_KEY]);
  if (rows[0]?.taken === true) return;
  const since = Date.now();
  const holder = await migrationLockHolder(run).catch(() => undefined);
  log?.warn({ holder }, 'another control plane is applying database migrations (it holds the migration lock); waiting for it to finish');
  const timer = setInterval(() => {
    log?.warn({ holder, waitingMs: Date.now() - since }, 'still waiting for the other control plane\'s database migrations (the migration lock)');
  }, MIGRATION_WAIT_LOG_MS);
  timer.unref();
  try {
    await run('select pg_advisory_lock($1::bigint)', [MIGRATION_LOCK_KEY]);
  } finally {
    clearInterval(timer);
  }
  log?.info({ waitedMs: Date.now() - since }, 'the migration lock is free; going on');
}

/** Who holds the migration lock: application name, client address and since when (no query text). */
async function migrationLockHolder(run: Run): Promise<{ pid: number; applicationName: string; clientAddress: string | null; since: string | null } | undefined> {
  const key = BigInt(MIGRATION_LOCK_KEY);
  const { rows } = await run<{ pid: number; application_name: string; client_addr: string | null; since: Date | null }>(
    `select a.pid, a.application_name, host(a.client_addr) as client_addr, a.backend_start as since
       from pg_locks l join pg_stat_activity a on a.pid = l.pid
      where l.locktype = 'advisory' and l.granted and l.classid = $1::bigint::oid and l.objid = $2::bigint::oid and l.objsubid = 1
      limit 1`,
    [(key >> 32n).toString(), (key & 0xffffffffn).toString()],
  );
  const row = rows[0];
  return row === undefined ? undefined : { pid: row.pid, applicationName: row.application_name, clientAddress: row.client_addr, since: row.since?.toISOString() ?? null };
}

/** A session holding a lock a migration waited for: who and since when, never its query text. */
export interface Blocker {
  pid: number;
  applicationName: string;
  user: string | null;
  state: string | null;
  transactionStart: string | null;
}

/**
 * Looks, from another pooled connection, at who blocks the migration's session while an attempt
 * waits: the last non-empty look is what the attempt's time-out is blamed on. A look never
 * overlaps the previous one; stop() waits for the one in flight.
 */
function watchBlockers(pool: pg.Pool, pid: number, lockTimeoutMs: number): { stop(): Promise<Blocker[]> } {
  let last: Blocker[] = [];
  let inFlight: Promise<void> | undefined;
  const look = (): void => {
    if (inFlight !== undefined) return;
    inFlight = pool
      .query<{ pid: number; application_name: string; usename: string | null; state: string | null; xact_start: Date | null }>(
        'select pid, application_name, usename, state, xact_start from pg_stat_activity where pid = any(pg_blocking_pids($1)) order by pid',
        [pid],
      )
      .then(({ rows }) => {
        if (rows.length > 0) {
          last = rows.map((r) => ({ pid: r.pid, applicationName: r.application_name, user: r.usename, state: r.state, transactionStart: r.xact_start?.toISOString() ?? null }));
        }
      })
      .catch(() => undefined)
      .finally(() => {
        inFlight = undefined;
      });
  };
  // Several looks per attempt, the last close to its end.
  const timer = setInterval(look, Math.max(25, Math.min(1_000, Math.floor(lockTimeoutMs / 4))));
  timer.unref();
  let stopped: Promise<Blocker[]> | undefined;
  return {
    stop(): Promise<Blocker[]> {
      stopped ??= (async () => {
        clearInterval(timer);
        // A look waiting for a pooled connection (all of them queued behind the migration) is not waited for long.
        let giveUp: NodeJS.Timeout | undefined;
        await Promise.race([inFlight, new Promise((resolve) => (giveUp = setTimeout(resolve, 2_000)))]);
        clearTimeout(giveUp);
        return last;
      })();
      return stopped;
    },
  };
}
