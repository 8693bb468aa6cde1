/**
 * The gateway's handler for RecordBatch (registered in gateway/node-stream-handlers.ts): validate,
 * ingest in one transaction, then ack. The ack is sent only after the commit, so a node deletes
 * nothing the control plane does not hold; a batch seen twice (a lost ack, a resend after a
 * reconnect) is acked again with its records counted as duplicates.
 */
import { z } from 'zod';
import { MAX_RECORD_JSON_BYTES, requestRecordSchema } from '../../../proto/src/index.js';
import type { NodeMessage, RequestRecord } from '../../../proto/src/index.js';
import { NodeMessageInvalid } from '../gateway/node-stream-handler.js';
import type { HandlerDeps, NodeStreamHandler } from '../gateway/node-stream-handler.js';
import { ingestRecords } from './record-ingestion.js';

/** Records per batch the control plane takes (the node sends at most 500). */
export const MAX_BATCH_RECORDS = 1000;

const batchSchema = z.object({
  batchId: z.string().min(1).max(128),
  records: z
    .array(z.object({ requestId: z.string().min(1).max(128), recordJson: z.instanceof(Uint8Array).refine((b) => b.length <= MAX_RECORD_JSON_BYTES, `must be at most ${MAX_RECORD_JSON_BYTES} bytes`) }))
    .min(1)
    .max(MAX_BATCH_RECORDS),
  firstSequence: z.bigint().min(0n),
  lastSequence: z.bigint().min(0n),
});

/** The batch's records, parsed and checked against the session's node; throws NodeMessageInvalid. */
export function parseRecordBatch(message: NodeMessage, nodeId: string): { batchId: string; lastSequence: bigint; records: RequestRecord[] } {
  const parsed = batchSchema.safeParse(message.recordBatch);
  if (!parsed.success) {
    throw new NodeMessageInvalid(parsed.error.issues.slice(0, 3).map((i) => `${i.path.join('.') || 'batch'} ${i.message}`).join('; '));
  }
  const batch = parsed.data;
  if (batch.lastSequence < batch.firstSequence) throw new NodeMessageInvalid('lastSequence is before firstSequence');
  const records: RequestRecord[] = [];
  for (const [index, entry] of batch.records.entries()) {
    let json: unknown;
    try {
      json = JSON.parse(Buffer.from(entry.recordJson.buffer, entry.recordJson.byteOffset, entry.recordJson.byteLength).toString('utf8'));
    } catch {
      throw new NodeMessageInvalid(`records[${index}] (${entry.requestId.slice(0, 64)}) is not JSON`);
    }
    const record = requestRecordSchema.safeParse(json);
    if (!record.success) {
      const issue = record.error.issues[0];
      throw new NodeMessageInvalid(`records[${index}] (${entry.requestId.slice(0, 64)}) is not a request record: ${issue?.path.join('.') ?? ''} ${issue?.message ?? ''}`);
    }
    if (record.data.requestId !== entry.requestId) throw new NodeMessageInvalid(`records[${index}] carries request id ${record.data.requestId.slice(0, 64)}, not ${entry.requestId.slice(0, 64)}`);
    // A node re-enrolled with --reenroll keeps its node id, so its old records match too; a record
    // of another node is never taken on this node's word.
    if (record.data.nodeId !== nodeId) throw new NodeMessageInvalid(`records[${index}] (${entry.requestId.slice(0, 64)}) belongs to node ${record.data.nodeId.slice(0, 64)}, not to this session's node`);
    records.push(record.data);
  }
  return { batchId: batch.batchId, lastSequence: batch.lastSequence, records };
}

export function recordBatchHandler(deps: HandlerDeps): NodeStreamHandler {
  return {
    name: 'records',
    payloads: ['recordBatch'],
    async handle(node, message, send) {
      const batch = parseRecordBatch(message, node.nodeId);
      const result = await ingestRecords(deps.pool, node, batch.records);
      if (result.duplicates > 0) deps.logger.info({ nodeId: node.nodeId, batchId: batch.batchId, duplicates: result.duplicates }, 'record batch held records already ingested');
      send({ recordBatchAck: { batchId: batch.batchId, lastSequence: batch.lastSequence, acceptedCount: result.accepted, duplicateCount: result.duplicates } });
    },
  };
}
