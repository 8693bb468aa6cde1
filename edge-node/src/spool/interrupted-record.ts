/**
 * The final record of a request the node stopped serving (crash, kill -9) while it was open: built
 * at the next start from what its open row holds. Nothing was delivered or metered for sure, so
 * usage and cost are 0; the reservation is kept so billing can see what was held.
 */
import { z } from 'zod';
import { MAX_RECORD_UNIX_MS, REQUEST_RECORD_SCHEMA_VERSION } from '../../../proto/src/index.js';
import type { RequestRecord } from '../../../proto/src/index.js';
import type { OpenRow } from './request-spool.js';
import { MAX_OWNER_SLOTS } from './spool-owner-lock.js';

const id = z.string().min(1).max(128);

/** An open row as stored (JSON in open_requests.row_json); read back defensively. */
export const openRowSchema = z.object({
  requestId: z.string().min(1).max(128),
  receivedAt: z.int().min(0),
  keyId: id.nullable(),
  accountId: id.nullable(),
  model: z.string().max(256).nullable(),
  reservedMicros: z.int().min(0).max(Number.MAX_SAFE_INTEGER),
  leaseId: z.string().max(128).nullable(),
  api: z.enum(['chat.completions', 'embeddings', 'models', 'messages', 'mcp']).optional(),
  surface: z.enum(['model', 'tools']).optional(),
  stream: z.boolean().optional(),
  configVersion: z.int().min(0).nullable().optional(),
  clientRequestId: id.optional(),
  priced: z.boolean().optional(),
  /**
   * The process that opened the row (spool-store.ts), so a live replica's rows are not taken: its
   * owner slot (spool-owner-lock.ts; absent in rows of older releases) and its pid.
   */
  owner: z
    .object({ pid: z.int().min(1), pidNs: z.string().max(128).nullable(), startTicks: z.string().max(32).nullable(), slot: z.int().min(0).max(MAX_OWNER_SLOTS - 1).optional() })
    .optional(),
});

/** `row` may be only a request id when the stored row could not be read. */
export function interruptedRecord(row: OpenRow | { requestId: string }, nodeId: string, finishedAt: number): RequestRecord {
  const full = 'receivedAt' in row ? row : undefined;
  // A damaged row's time beyond what the control plane stores would get the record set aside, unbilled.
  const receivedAt = Math.min(full?.receivedAt ?? finishedAt, MAX_RECORD_UNIX_MS);
  return {
    schemaVersion: REQUEST_RECORD_SCHEMA_VERSION,
    requestId: row.requestId,
    nodeId,
    configVersion: full?.configVersion ?? null,
    receivedAt,
    finishedAt: Math.max(finishedAt, receivedAt),
    surface: full?.surface ?? 'model',
    api: full?.api ?? 'chat.completions',
    keyId: full?.keyId ?? null,
    accountId: full?.accountId ?? null,
    model: full?.model?.slice(0, 256) ?? null,
    upstream: null,
    upstreamModel: null,
    stream: full?.stream ?? false,
    status: 'interrupted',
    httpStatus: 0,
    errorCode: null,
    usage: { inputTokens: 0, outputTokens: 0, estimated: false },
    // A row of an older release does not say: only a priced request reserves anything.
    cost: { reservedMicros: full?.reservedMicros ?? 0, costMicros: 0, leaseId: full?.leaseId ?? null, priced: full?.priced ?? (full?.reservedMicros ?? 0) > 0 },
    timings: { totalMs: Math.max(0, finishedAt - receivedAt), upstreamFirstByteMs: null, upstreamMs: null, stagesUs: {} },
    attempts: [],
    guardrails: [],
    bodies: null,
    ...(full?.clientRequestId === undefined ? {} : { clientRequestId: full.clientRequestId }),
  };
}
