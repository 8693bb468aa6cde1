/**
 * The gateway's handler for RecordBatch (registered in gateway/node-stream-handlers.ts): validate,
 * ingest in one transaction, then ack. The ack is sent only after the commit, so a node deletes
 * nothing the control plane does not hold; a batch seen twice (a lost ack, a resend after a
 * reconnect) is acked again with its records counted as duplicates.
 *
 * A malformed batch (its id, its sequences, its record count, an entry of the wrong shape) breaks
 * the protocol and ends the session with MESSAGE_INVALID. One record that cannot be ingested does
 * not: it is kept as sent in rejected_request_records (migration 0009) in the same transaction as
 * the batch's good records, and the batch is acknowledged with it counted as rejected. Refusing
 * the batch made the node resend it from that row on every session, so one damaged spool row (or a
 * record a newer node wrote) stopped its backlog and its whole control link for good. A record
 * that passes these checks but that PostgreSQL refuses, or whose request id another node's record
 * holds, is set aside the same way by ingestRecords, as is one received outside the window around
 * the control plane's clock this handler passes (receivedAtWindow) and a later copy with other
 * content of a record the node sent before.
 *
 * A batch of a node found deleted (ingestRecords' NodeDeletedError) is not acked and ends the
 * session with NODE_DELETED: none of it was stored, so the node keeps its records.
 */
import { createHash } from 'node:crypto';
import { isUtf8 } from 'node:buffer';
import { z } from 'zod';
import { MAX_RECORD_JSON_BYTES, isPlainValidRecord, requestRecordSchema } from '../../../proto/src/index.js';
import type { NodeMessage, RequestRecord } from '../../../proto/src/index.js';
import { NodeMessageInvalid } from '../gateway/node-stream-handler.js';
import type { HandlerDeps, NodeStreamHandler } from '../gateway/node-stream-handler.js';
import { ingestRecords, receivedAtWindow } from './record-ingestion.js';
import type { RejectedRecord, RejectionReason } from './record-ingestion.js';

/** Records per batch the control plane takes (the node sends at most 500). */
export const MAX_BATCH_RECORDS = 1000;

// Only what makes the batch itself unreadable is checked here; each record is checked on its own.
const batchSchema = z.object({
  batchId: z.string().min(1).max(128),
  records: z
    .array(z.object({ requestId: z.string(), recordJson: z.instanceof(Uint8Array) }))
    .min(1)
    .max(MAX_BATCH_RECORDS),
  firstSequence: z.bigint().min(0n),
  lastSequence: z.bigint().min(0n),
});

export interface ParsedRecordBatch {
  batchId: string;
  lastSequence: bigint;
  records: RequestRecord[];
  /** Records that cannot be ingested, as sent, with why. */
  rejected: RejectedRecord[];
  /** Each record's JSON as sent, by request id (kept should storing the record fail). */
  sent: Map<string, Buffer>;
}

type Entry = { requestId: string; recordJson: Uint8Array };

/** The record an entry carries, or why it cannot be ingested. */
function checkEntry(entry: Entry, nodeId: string): RequestRecord | { reason: RejectionReason; detail: string } {
  if (entry.requestId.length < 1 || entry.requestId.length > 128) return { reason: 'invalid_request_id', detail: `request id of ${entry.requestId.length} characters (1-128 allowed)` };
  const bytes = Buffer.from(entry.recordJson.buffer, entry.recordJson.byteOffset, entry.recordJson.byteLength);
  if (bytes.length > MAX_RECORD_JSON_BYTES) return { reason: 'too_large', detail: `${bytes.length} bytes (at most ${MAX_RECORD_JSON_BYTES})` };
  // A node encodes JS strings, which always gives valid UTF-8: anything else is a damaged row.
  if (!isUtf8(bytes)) return { reason: 'not_utf8', detail: 'record_json is not valid UTF-8' };
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString('utf8'));
  } catch {
    return { reason: 'not_json', detail: 'record_json is not JSON' };
  }
  // The hand-written check takes the records a node writes; anything it doubts goes to the schema.
  const record = isPlainValidRecord(json) ? { success: true as const, data: json } : requestRecordSchema.safeParse(json);
  if (!record.success) {
    const issues = record.error.issues.slice(0, 3).map((i) => `${i.path.join('.') || 'record'}: ${i.message}`);
    return { reason: 'invalid_record', detail: `not a request record (${issues.join('; ')})`.slice(0, 500) };
  }
  if (record.data.requestId !== entry.requestId) return { reason: 'request_id_mismatch', detail: 'the record carries another request id than its batch entry' };
  // A node re-enrolled with --reenroll keeps its node id, so its old records match too; a record
  // of another node is never taken on this node's word.
  if (record.data.nodeId !== nodeId) return { reason: 'foreign_node', detail: `the record belongs to node ${record.data.nodeId.slice(0, 64)}, not to this session's node` };
  return record.data;
}

/**
 * The batch's records, parsed and checked against the session's node, and those that cannot be
 * ingested. Throws NodeMessageInvalid only when the batch itself is malformed.
 */
export function parseRecordBatch(message: NodeMessage, nodeId: string): ParsedRecordBatch {
  const parsed = batchSchema.safeParse(message.recordBatch);
  if (!parsed.success) {
    throw new NodeMessageInvalid(parsed.error.issues.slice(0, 3).map((i) => `${i.path.join('.') || 'batch'} ${i.message}`).join('; '));
  }
  const batch = parsed.data;
  if (batch.lastSequence < batch.firstSequence) throw new NodeMessageInvalid('lastSequence is before firstSequence');
  const records: RequestRecord[] = [];
  const rejected: RejectedRecord[] = [];
  const sent = new Map<string, Buffer>();
  for (const entry of batch.records) {
    const checked = checkEntry(entry, nodeId);
    const bytes = Buffer.from(entry.recordJson.buffer, entry.recordJson.byteOffset, entry.recordJson.byteLength);
    if ('reason' in checked) {
      rejected.push({ requestId: entry.requestId, reason: checked.reason, detail: checked.detail, bytes, sha256: createHash('sha256').update(bytes).digest() });
    } else {
      records.push(checked);
      // The first copy's bytes: ingestion keeps the first record of a request id.
      if (!sent.has(checked.requestId)) sent.set(checked.requestId, bytes);
    }
  }
  return { batchId: batch.batchId, lastSequence: batch.lastSequence, records, rejected, sent };
}

export function recordBatchHandler(handlerDeps: HandlerDeps): NodeStreamHandler {
  const deps = { ...handlerDeps, logger: handlerDeps.logger.child({ component: 'records' }) };
  return {
    name: 'records',
    payloads: ['recordBatch'],
    async handle(node, message, send) {
      const batch = parseRecordBatch(message, node.nodeId);
      const window = receivedAtWindow(Date.now());
      const result = await ingestRecords(deps.pool, node, batch.records, { batchId: batch.batchId, rejected: batch.rejected, sent: batch.sent }, deps.logger, window);
      if (result.duplicates > 0) deps.logger.info({ nodeId: node.nodeId, batchId: batch.batchId, duplicates: result.duplicates }, 'record batch held records already ingested');
      if (result.rejected > 0) {
        // Reasons and request ids only: record content stays in the table.
        const rejected = [...batch.rejected, ...result.setAside];
        const reasons: Partial<Record<RejectionReason, number>> = {};
        for (const r of rejected) reasons[r.reason] = (reasons[r.reason] ?? 0) + 1;
        deps.logger.error(
          {
            nodeId: node.nodeId,
            batchId: batch.batchId,
            rejected: result.rejected,
            newlyStored: result.rejectedStored,
            reasons,
            setAside: result.setAside.length,
            requestIds: rejected.slice(0, 10).map((r) => r.requestId.slice(0, 64)),
          },
          'record batch held records that cannot be ingested; kept in rejected_request_records, the rest of the batch was ingested',
        );
      }
      send({
        recordBatchAck: {
          batchId: batch.batchId,
          lastSequence: batch.lastSequence,
          acceptedCount: result.accepted,
          duplicateCount: result.duplicates,
          rejectedCount: result.rejected,
        },
      });
    },
  };
}
