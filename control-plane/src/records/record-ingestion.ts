/**
 * Idempotent ingestion of request records (migration 0006): one transaction per batch inserts the
 * ids into request_record_ids (ON CONFLICT DO NOTHING RETURNING), the rows of the ids that were
 * new into request_records (multi-row INSERT from arrays), and settles exactly those records
 * (billing's settleIngestedRecords), so a resent batch is neither stored nor charged twice.
 */
import type pg from 'pg';
import type { RequestRecord } from '../../../proto/src/index.js';
import { settleIngestedRecords } from '../billing/settlement.js';
import { withTransaction } from '../nodes/with-transaction.js';
import { ensurePartitions, rememberPartitions } from './record-partitions.js';

export interface IngestResult {
  accepted: number;
  duplicates: number;
}

export async function ingestRecords(pool: pg.Pool, node: { nodeId: string; nodeName: string }, records: readonly RequestRecord[]): Promise<IngestResult> {
  if (records.length === 0) return { accepted: 0, duplicates: 0 };
  // One record per request id within the batch too (a node never sends two, but the key decides).
  const unique = [...new Map(records.map((r) => [r.requestId, r])).values()];
  let created: string[] = [];
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
        await client.query(
          `insert into request_records (request_id, received_at, finished_at, node_id, node_name, key_id, account_id, model, api,
                                        status, http_status, error_code, input_tokens, output_tokens, cost_micros, record)
           select r.request_id, to_timestamp(r.received_ms / 1000.0), to_timestamp(r.finished_ms / 1000.0), $1, $2, r.key_id,
                  r.account_id, r.model, r.api, r.status, r.http_status, r.error_code, r.input_tokens, r.output_tokens, r.cost_micros, r.record
           from unnest($3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
                       $11::int[], $12::text[], $13::bigint[], $14::bigint[], $15::bigint[], $16::jsonb[])
             as r(request_id, received_ms, finished_ms, key_id, account_id, model, api, status, http_status, error_code,
                  input_tokens, output_tokens, cost_micros, record)`,
          [
            node.nodeId,
            node.nodeName,
            newRecords.map((r) => r.requestId),
            newRecords.map((r) => r.receivedAt),
            newRecords.map((r) => r.finishedAt),
            newRecords.map((r) => r.keyId),
            newRecords.map((r) => r.accountId),
            newRecords.map((r) => r.model),
            newRecords.map((r) => r.api),
            newRecords.map((r) => r.status),
            newRecords.map((r) => r.httpStatus),
            newRecords.map((r) => r.errorCode),
            newRecords.map((r) => r.usage.inputTokens),
            newRecords.map((r) => r.usage.outputTokens),
            newRecords.map((r) => r.cost.costMicros),
            newRecords.map((r) => JSON.stringify(r)),
          ],
        );
        await settleIngestedRecords(client, node.nodeId, newRecords);
      }
      return { accepted: newRecords.length, duplicates: records.length - newRecords.length };
  });
  rememberPartitions(created);
  return result;
}
