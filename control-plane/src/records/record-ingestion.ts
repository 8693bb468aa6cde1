/**
 * Idempotent ingestion of request records (migration 0006): one transaction per batch inserts the
 * ids into request_record_ids (ON CONFLICT DO NOTHING RETURNING), the rows of the ids that were
 * new into request_records (one INSERT from the batch as a JSON array), and settles exactly those
 * records (billing's settleIngestedRecords), so a resent batch is neither stored nor charged twice.
 * Text PostgreSQL cannot hold (NUL, unpaired surrogates) is replaced first (storable-text.ts).
 */
import type pg from 'pg';
import type { RequestRecord } from '../../../proto/src/index.js';
import { settleIngestedRecords } from '../billing/settlement.js';
import { withTransaction } from '../nodes/with-transaction.js';
import { ensurePartitions, rememberPartitions } from './record-partitions.js';
import { storableJsonArray } from './storable-text.js';
import type { MonthPartition } from './record-partitions.js';

export interface IngestResult {
  accepted: number;
  duplicates: number;
}

export async function ingestRecords(pool: pg.Pool, node: { nodeId: string; nodeName: string }, records: readonly RequestRecord[]): Promise<IngestResult> {
  if (records.length === 0) return { accepted: 0, duplicates: 0 };
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
      return { accepted: newRecords.length, duplicates: records.length - newRecords.length };
  });
  rememberPartitions(created);
  return result;
}
