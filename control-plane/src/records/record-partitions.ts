/**
 * Monthly partitions of request_records, created on demand before records of a new month are
 * inserted. Creation takes a transaction-scoped advisory lock so replicas ingesting the same new
 * month take turns (CREATE TABLE IF NOT EXISTS alone can still race on the catalog). Partitions
 * known to exist are remembered per process, so the steady state costs no query.
 */
import type pg from 'pg';

/** Fixed key of the partition-creation lock ("zenova" + 0006). */
const PARTITION_LOCK_KEY = BigInt('0x7a656e6f76610006').toString();

const known = new Set<string>();

/** The month bucket of a unix-ms time, e.g. { name: 'request_records_p202611', from, to } (UTC). */
export function monthPartition(unixMs: number): { name: string; from: string; to: string } {
  const date = new Date(unixMs);
  const year = date.getUTCFullYear();
  const month = date.getUTCMonth();
  const from = new Date(Date.UTC(year, month, 1));
  const to = new Date(Date.UTC(year, month + 1, 1));
  const name = `request_records_p${String(year).padStart(4, '0')}${String(month + 1).padStart(2, '0')}`;
  return { name, from: from.toISOString(), to: to.toISOString() };
}

/**
 * Makes sure every month of `times` has its partition; call inside the ingestion transaction and,
 * once it committed, pass the returned names to rememberPartitions (a rolled-back creation must not
 * be remembered).
 */
export async function ensurePartitions(client: pg.PoolClient, times: readonly number[]): Promise<string[]> {
  const needed = new Map<string, { name: string; from: string; to: string }>();
  for (const t of times) {
    const p = monthPartition(t);
    if (!known.has(p.name)) needed.set(p.name, p);
  }
  if (needed.size === 0) return [];
  await client.query('select pg_advisory_xact_lock($1::bigint)', [PARTITION_LOCK_KEY]);
  for (const p of needed.values()) {
    // The name is ours (digits only), the bounds are ISO timestamps we formatted: no user input.
    await client.query(`create table if not exists ${p.name} partition of request_records for values from ('${p.from}') to ('${p.to}')`);
  }
  return [...needed.keys()];
}

export function rememberPartitions(names: readonly string[]): void {
  for (const name of names) known.add(name);
}
