/**
 * Reading request records for the admin API: one by request id (through request_record_ids, so
 * only its partition is read), else the record of that id ingestion set aside, and filtered lists, newest first, with keyset pagination on
 * (received_at, request_id): a cursor (record-cursor.ts) is the last row's pair, so pages stay
 * stable while records keep arriving.
 */
import type pg from 'pg';
import type { RecordCursor } from './record-cursor.js';
import type { RecordRow, RecordSummary, SummaryRow } from './record-view.js';

export interface RecordFilter {
  /** One node: its records, whatever node held its name before or after it. */
  node?: { id: string; name: string };
  keyId?: string;
  /** One account's records, by the account's id (the records' accountId). */
  accountId?: string;
  model?: string;
  status?: string;
  /** The caller's own id (not unique: every request sent with it). */
  clientRequestId?: string;
  /** Unix ms, inclusive. */
  from?: number;
  /** Unix ms, exclusive. */
  to?: number;
  limit: number;
  cursor?: RecordCursor;
}

const COLUMNS = 'node_id, node_name, record, ingested_at';

const SUMMARY_FIELDS = [
  'requestId', 'clientRequestId', 'receivedAt', 'finishedAt', 'api', 'keyId', 'accountId', 'model', 'status', 'httpStatus', 'errorCode', 'usage',
] as const satisfies ReadonlyArray<keyof RecordSummary>;
// A list shows summaries, so only a summary's fields (SummaryRow) leave the database: reading
// records whole sent every body (up to 1 MiB each), attempt and verdict to be parsed and dropped.
// jsonb_to_record reads each record once: every `record -> 'field'` fetched it from TOAST (and
// decompressed it) again, a dozen reads of each record.
const SUMMARY_COLUMNS = `node_id, node_name, (
  select jsonb_build_object(${SUMMARY_FIELDS.map((f) => `'${f}', s."${f}"`).join(', ')},
    'cost', jsonb_build_object('costMicros', s.cost -> 'costMicros'), 'timings', jsonb_build_object('totalMs', s.timings -> 'totalMs'))
  from jsonb_to_record(record) as s(${[...SUMMARY_FIELDS, 'cost', 'timings'].map((f) => `"${f}" jsonb`).join(', ')})
) as record`;

export async function getRecord(pool: pg.Pool, requestId: string): Promise<RecordRow | undefined> {
  const result = await pool.query<RecordRow>(
    `select ${COLUMNS} from request_records r
     where r.request_id = $1 and r.received_at = (select received_at from request_record_ids where request_id = $1)`,
    [requestId],
  );
  return result.rows[0];
}

/** A record of a request id that ingestion set aside (rejected_request_records): the latest one. */
export interface SetAsideRecord {
  nodeId: string;
  nodeName: string | null;
  reason: string;
  /** Field paths and schema messages, never the record's values (record-batch-handler.ts). */
  detail: string;
  receivedAt: Date;
  /** How many records of this id were set aside (from one node or several). */
  count: number;
}

/**
 * Read only when request_records has no record of the id. No index on request_id: the table holds
 * the few records that failed ingestion (their bodies are out of line in TOAST, not read here).
 */
export async function findSetAsideRecord(pool: pg.Pool, requestId: string): Promise<SetAsideRecord | undefined> {
  const result = await pool.query<{ node_id: string; node_name: string | null; reason: string; detail: string; received_at: Date; count: number }>(
    `select node_id, node_name, reason, detail, received_at, count(*) over ()::int as count from rejected_request_records
     where request_id = $1 order by received_at desc, id desc limit 1`,
    [requestId],
  );
  const row = result.rows[0];
  if (row === undefined) return undefined;
  return { nodeId: row.node_id, nodeName: row.node_name, reason: row.reason, detail: row.detail, receivedAt: row.received_at, count: row.count };
}

/** The list's SQL and parameters (apart from running it, so a test can read its plan). */
export function listRecordsQuery(filter: RecordFilter): { text: string; values: unknown[] } {
  const where: string[] = [];
  const params: unknown[] = [];
  const add = (sql: (p: string) => string, value: unknown): void => {
    params.push(value);
    where.push(sql(`$${params.length}`));
  };
  // A node's name never changes and each record keeps the name its node had, so the name reads the
  // node_name index (no index on node_id: one insertion less per ingested record, migration 0008)
  // and the id keeps out another node that had or has the same name (deleted names are reused).
  if (filter.node !== undefined) {
    add((p) => `node_name = ${p}`, filter.node.name);
    add((p) => `node_id = ${p}`, filter.node.id);
  }
  if (filter.keyId !== undefined) add((p) => `key_id = ${p}`, filter.keyId);
  // Reads the partial index of records with an account (migration 0020): `=` implies not null.
  if (filter.accountId !== undefined) add((p) => `account_id = ${p}`, filter.accountId);
  if (filter.model !== undefined) add((p) => `model = ${p}`, filter.model);
  if (filter.status !== undefined) add((p) => `status = ${p}`, filter.status);
  // Both conditions: the index is partial (migration 0010) and the planner cannot infer `?` from `->>`.
  if (filter.clientRequestId !== undefined) add((p) => `record ? 'clientRequestId' and record ->> 'clientRequestId' = ${p}`, filter.clientRequestId);
  if (filter.from !== undefined) add((p) => `received_at >= to_timestamp(${p}::bigint / 1000.0)`, filter.from);
  if (filter.to !== undefined) add((p) => `received_at < to_timestamp(${p}::bigint / 1000.0)`, filter.to);
  if (filter.cursor !== undefined) {
    params.push(filter.cursor.receivedAtMs, filter.cursor.requestId);
    where.push(`(received_at, request_id) < (to_timestamp($${params.length - 1}::bigint / 1000.0), $${params.length})`);
  }
  params.push(filter.limit + 1);
  return {
    text: `select ${SUMMARY_COLUMNS}, (extract(epoch from received_at) * 1000)::bigint as received_ms from request_records
     ${where.length > 0 ? `where ${where.join(' and ')}` : ''}
     order by received_at desc, request_id desc
     limit $${params.length}`,
    values: params,
  };
}

export async function listRecords(pool: pg.Pool, filter: RecordFilter): Promise<{ rows: SummaryRow[]; next: RecordCursor | undefined }> {
  const result = await pool.query<SummaryRow & { received_ms: string }>(listRecordsQuery(filter));
  const rows = result.rows.slice(0, filter.limit);
  const last = rows.at(-1);
  const next = result.rows.length > filter.limit && last !== undefined ? { receivedAtMs: Number(last.received_ms), requestId: last.record.requestId } : undefined;
  return { rows, next };
}
