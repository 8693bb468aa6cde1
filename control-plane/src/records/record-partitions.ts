/**
 * Monthly partitions of request_records, created on demand before records of a new month are
 * inserted (with the month after it, ahead). Creation takes a transaction-scoped advisory lock so replicas ingesting the same new
 * month take turns (CREATE TABLE IF NOT EXISTS alone can still race on the catalog). Partitions
 * known to exist are remembered per process, so the steady state costs no query.
 */
import type pg from 'pg';

/** Fixed key of the partition-creation lock ("zenova" + 0006). */
const PARTITION_LOCK_KEY = BigInt('0x7a656e6f76610006').toString();

export interface MonthPartition {
  name: string;
  /** ISO bounds for the DDL (as PostgreSQL parses them). */
  from: string;
  to: string;
  /** The same bounds in unix ms, [fromMs, toMs). */
  fromMs: number;
  toMs: number;
}

/** Partitions known to exist; checked by bounds, so the steady state formats no dates. */
const known: MonthPartition[] = [];

function inKnownPartition(unixMs: number): boolean {
  for (const p of known) if (unixMs >= p.fromMs && unixMs < p.toMs) return true;
  return false;
}

/**
 * A partition bound PostgreSQL parses. Not toISOString(): past year 9999 it writes an expanded
 * year ('+010000-01-01…'), which PostgreSQL takes for a time zone and refuses, so December 9999
 * (the last month a record may carry) could not get its partition.
 */
function partitionBound(unixMs: number): string {
  const date = new Date(unixMs);
  const month = String(date.getUTCMonth() + 1).padStart(2, '0');
  return `${String(date.getUTCFullYear()).padStart(4, '0')}-${month}-01T00:00:00Z`;
}

/**
 * The month bucket of a unix-ms time, e.g. { name: 'request_records_p202611', from, to } (UTC).
 * Throws a RangeError for a time outside JavaScript's Date range (requestRecordSchema keeps
 * records within year 9999).
 */
export function monthPartition(unixMs: number): MonthPartition {
  const date = new Date(unixMs);
  if (Number.isNaN(date.getTime())) throw new RangeError('a record time outside the range of dates');
  const year = date.getUTCFullYear();
  const month = date.getUTCMonth();
  const fromMs = Date.UTC(year, month, 1);
  const toMs = Date.UTC(year, month + 1, 1);
  const name = `request_records_p${String(year).padStart(4, '0')}${String(month + 1).padStart(2, '0')}`;
  return { name, from: partitionBound(fromMs), to: partitionBound(toMs), fromMs, toMs };
}

/** The month after `p`'s. */
function nextMonth(p: MonthPartition): MonthPartition {
  return monthPartition(p.toMs);
}

/** The latest month a record may carry (requestRecordSchema: within year 9999). */
const LAST_MONTH_FROM_MS = Date.UTC(9999, 11, 1);

/**
 * Makes sure every month of `times` has its partition, and the month after it (made ahead, so the
 * first records of a month seldom make their own); call inside the ingestion transaction and, once
 * it committed, pass the returned partitions to rememberPartitions (a rolled-back creation must not
 * be remembered).
 *
 * A partition is created apart and then attached: `CREATE TABLE … PARTITION OF` takes an ACCESS
 * EXCLUSIVE lock on request_records, which waits behind every reader (a backup's pg_dump holds one
 * for its whole run) while every later reader and insert of every replica queues behind it; ATTACH
 * PARTITION takes SHARE UPDATE EXCLUSIVE, which neither readers nor inserts conflict with.
 */
export async function ensurePartitions(client: pg.PoolClient, times: readonly number[]): Promise<MonthPartition[]> {
  const needed = new Map<string, MonthPartition>();
  for (const t of times) {
    if (inKnownPartition(t)) continue;
    const p = monthPartition(t);
    needed.set(p.name, p);
    if (p.fromMs < LAST_MONTH_FROM_MS) {
      const next = nextMonth(p);
      needed.set(next.name, next);
    }
  }
  if (needed.size === 0) return [];
  await client.query('select pg_advisory_xact_lock($1::bigint)', [PARTITION_LOCK_KEY]);
  const { rows } = await client.query<{ name: string }>(
    'select relname as name from pg_class where relname = any($1::text[]) and relnamespace = current_schema()::regnamespace',
    [[...needed.keys()]],
  );
  const existing = new Set(rows.map((r) => r.name));
  for (const p of needed.values()) {
    if (existing.has(p.name)) continue;
    // The name is ours (digits only), the bounds are timestamps we formatted: no user input. The
    // attach adds the parent's indexes and primary key to the (empty) table.
    await client.query(`create table ${p.name} (like request_records including defaults including constraints)`);
    await client.query(`alter table request_records attach partition ${p.name} for values from ('${p.from}') to ('${p.to}')`);
  }
  return [...needed.values()];
}

export function rememberPartitions(created: readonly MonthPartition[]): void {
  for (const p of created) if (!known.some((k) => k.name === p.name)) known.push(p);
}
