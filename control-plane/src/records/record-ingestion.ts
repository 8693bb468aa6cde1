/**
 * Idempotent ingestion of request records (migration 0006): one transaction per batch inserts the
 * ids into request_record_ids (ON CONFLICT DO NOTHING RETURNING), the rows of the ids that were
 * new into request_records (one INSERT from the batch as a JSON array), and settles exactly those
 * records (billing's settleIngestedRecords), so a resent batch is neither stored nor charged twice.
 * Text PostgreSQL cannot hold (NUL, unpaired surrogates) is replaced first (storable-text.ts).
 * Records the batch handler could not accept go into rejected_request_records (migration 0009) in
 * the same transaction, once per node, request id and content hash, so a resend stores none twice.
 */
import type pg from 'pg';
import { isUtf8 } from 'node:buffer';
import { MAX_RECORD_JSON_BYTES } from '../../../proto/src/index.js';
import type { RequestRecord } from '../../../proto/src/index.js';
import { settleIngestedRecords } from '../billing/settlement.js';
import { withTransaction } from '../nodes/with-transaction.js';
import { ensurePartitions, rememberPartitions } from './record-partitions.js';
import { storableJsonArray } from './storable-text.js';
import type { MonthPartition } from './record-partitions.js';

export interface IngestResult {
  accepted: number;
  duplicates: number;
  /** Records of the batch that could not be ingested (stored now or by an earlier send). */
  rejected: number;
  /** Of those, the ones stored now (the others were there from an earlier send of the batch). */
  rejectedStored: number;
}

export type RejectionReason = 'not_utf8' | 'not_json' | 'invalid_record' | 'request_id_mismatch' | 'foreign_node' | 'too_large' | 'invalid_request_id';

/** A batch entry that cannot be ingested, as the node sent it. */
export interface RejectedRecord {
  requestId: string;
  reason: RejectionReason;
  /** Why, in a few words: field paths and schema messages, never the record's values. */
  detail: string;
  bytes: Buffer;
  /** SHA-256 of `bytes` (the dedupe key with the node and request id). */
  sha256: Buffer;
}

export interface RejectedBatch {
  batchId: string;
  rejected: readonly RejectedRecord[];
}

/** The columns of a rejected record: bounded, and in a form PostgreSQL can store. */
function rejectedRow(r: RejectedRecord): { requestId: string; detail: string; text: string | null; bytes: Buffer | null; size: number } {
  const [requestId = '', detail = ''] = storableJsonArray([r.requestId.slice(0, 128), r.detail.slice(0, 500)]).values;
  const kept = r.bytes.subarray(0, MAX_RECORD_JSON_BYTES);
  // Text when PostgreSQL can hold it as such (readable in psql), the bytes as they were otherwise.
  const asText = isUtf8(kept) && !kept.includes(0);
  return { requestId, detail, text: asText ? kept.toString('utf8') : null, bytes: asText ? null : kept, size: r.bytes.length };
}

async function storeRejected(client: pg.PoolClient, node: { nodeId: string; nodeName: string }, batch: RejectedBatch): Promise<number> {
  if (batch.rejected.length === 0) return 0;
  const rows = batch.rejected.map(rejectedRow);
  const inserted = await client.query(
    `insert into rejected_request_records (node_id, node_name, request_id, reason, detail, record_text, record_bytes, record_size, record_sha256, batch_id)
     select $1, $2, r.request_id, r.reason, r.detail, r.record_text, r.record_bytes, r.record_size, r.record_sha256, $10
     from unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::bytea[], $8::int[], $9::bytea[])
       as r(request_id, reason, detail, record_text, record_bytes, record_size, record_sha256)
     on conflict (node_id, request_id, record_sha256) do nothing`,
    [
      node.nodeId,
      node.nodeName,
      rows.map((r) => r.requestId),
      batch.rejected.map((r) => r.reason),
      rows.map((r) => r.detail),
      rows.map((r) => r.text),
      rows.map((r) => r.bytes),
      rows.map((r) => r.size),
      batch.rejected.map((r) => r.sha256),
      storableJsonArray([batch.batchId]).values[0] ?? '',
    ],
  );
  return inserted.rowCount ?? 0;
}

export async function ingestRecords(
  pool: pg.Pool,
  node: { nodeId: string; nodeName: string },
  records: readonly RequestRecord[],
  rejectedBatch: RejectedBatch = { batchId: '', rejected: [] },
): Promise<IngestResult> {
  const rejected = rejectedBatch.rejected.length;
  if (records.length === 0 && rejected === 0) return { accepted: 0, duplicates: 0, rejected: 0, rejectedStored: 0 };
  if (records.length === 0) {
    const rejectedStored = await withTransaction(pool, (client) => storeRejected(client, node, rejectedBatch));
    return { accepted: 0, duplicates: 0, rejected, rejectedStored };
  }
  // Characters PostgreSQL cannot store are replaced first, so ids are compared as they will be stored.
  const storable = storableJsonArray(records);
  // One record per request id within the batch too (a node never sends two, but the key decides).
  const unique = [...new Map(storable.values.map((r) => [r.requestId, r])).values()];
  let created: MonthPartition[] = [];
  const result = await withTransaction(pool, async (client) => {
      created = await ensurePartitions(client, unique.map((r) => r.receivedAt));
      const ids = await client.query<{ request_id: string }>(
        `insert into request_record_ids (request_id, received_at, node_id)
         select id, to_timestamp(ms / 1000.0), $3 from unnest($1::text[], $2::bigint[]) as r(id, ms)
         on conflict (request_id) do nothing
         returning request_id`,
        [unique.map((r) => r.requestId), unique.map((r) => r.receivedAt), node.nodeId],
      );
      const fresh = new Set(ids.rows.map((r) => r.request_id));
      const newRecords = unique.filter((r) => fresh.has(r.requestId));
      if (newRecords.length > 0) {
        // The records go over as one JSON array that PostgreSQL parses once and takes the columns
        // from: per-column arrays (a jsonb[] above all) cost three times the control plane's CPU
        // in pg's array escaping, and PostgreSQL a third more to parse (npm run bench:ingest).
        await client.query(
          `insert into request_records (request_id, received_at, finished_at, node_id, node_name, key_id, account_id, model, api,
                                        status, http_status, error_code, input_tokens, output_tokens, cost_micros, record)
           select r->>'requestId', to_timestamp((r->>'receivedAt')::bigint / 1000.0), to_timestamp((r->>'finishedAt')::bigint / 1000.0),
                  $1, $2, r->>'keyId', r->>'accountId', r->>'model', r->>'api', r->>'status', (r->>'httpStatus')::int, r->>'errorCode',
                  (r #>> '{usage,inputTokens}')::bigint, (r #>> '{usage,outputTokens}')::bigint, (r #>> '{cost,costMicros}')::bigint, r
           from jsonb_array_elements($3::jsonb) as r`,
          [node.nodeId, node.nodeName, newRecords.length === storable.values.length ? storable.json : JSON.stringify(newRecords)],
        );
        await settleIngestedRecords(client, node.nodeId, newRecords);
      }
      const rejectedStored = await storeRejected(client, node, rejectedBatch);
      return { accepted: newRecords.length, duplicates: records.length - newRecords.length, rejected, rejectedStored };
  });
  rememberPartitions(created);
  return result;
}
