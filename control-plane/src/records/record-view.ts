/**
 * What the admin API shows of a request record: the summary in lists and the full view of one
 * request (node, key, model, status, tokens, cost, timings, guardrail verdicts, attempts, bodies).
 * The zod schemas are the response schemas.
 */
import { z } from 'zod';
import { guardrailVerdictSchema, recordStatusSchema, requestRecordSchema, upstreamAttemptSchema } from '../../../proto/src/index.js';
import type { RequestRecord } from '../../../proto/src/index.js';

export const requestSummarySchema = z.object({
  requestId: z.string(),
  /** The caller's own id (x-client-request-id / x-request-id), null when it sent none; not unique. */
  clientRequestId: z.string().nullable(),
  node: z.object({ id: z.string(), name: z.string().nullable() }),
  receivedAt: z.string(),
  finishedAt: z.string(),
  api: z.string(),
  keyId: z.string().nullable(),
  accountId: z.string().nullable(),
  model: z.string().nullable(),
  status: recordStatusSchema,
  httpStatus: z.number(),
  errorCode: z.string().nullable(),
  usage: z.object({ inputTokens: z.number(), outputTokens: z.number(), estimated: z.boolean() }),
  costMicros: z.number(),
  totalMs: z.number(),
});

export const requestDetailSchema = requestSummarySchema.extend({
  surface: z.string(),
  stream: z.boolean(),
  configVersion: z.number().nullable(),
  upstream: z.string().nullable(),
  upstreamModel: z.string().nullable(),
  cost: requestRecordSchema.shape.cost,
  timings: requestRecordSchema.shape.timings,
  guardrails: z.array(guardrailVerdictSchema),
  attempts: z.array(upstreamAttemptSchema),
  bodies: requestRecordSchema.shape.bodies,
  ingestedAt: z.string(),
});

export type RequestSummary = z.infer<typeof requestSummarySchema>;
export type RequestDetail = z.infer<typeof requestDetailSchema>;

export interface RecordRow {
  node_id: string;
  node_name: string | null;
  record: RequestRecord;
  ingested_at: Date;
}

/** The parts of a record a summary shows: all a list reads of it (record-queries.ts). */
export type RecordSummary = Pick<RequestRecord, 'requestId' | 'receivedAt' | 'finishedAt' | 'api' | 'keyId' | 'accountId' | 'model' | 'status' | 'httpStatus' | 'errorCode' | 'usage'> & {
  /** null when the caller sent none (the list's JSON has the key; a whole record omits it). */
  clientRequestId?: string | null;
  cost: Pick<RequestRecord['cost'], 'costMicros'>;
  timings: Pick<RequestRecord['timings'], 'totalMs'>;
};

export interface SummaryRow {
  node_id: string;
  node_name: string | null;
  record: RecordSummary;
}

const iso = (ms: number): string => new Date(ms).toISOString();

export function toRequestSummary(row: SummaryRow): RequestSummary {
  const r = row.record;
  return {
    requestId: r.requestId,
    clientRequestId: r.clientRequestId ?? null,
    node: { id: row.node_id, name: row.node_name },
    receivedAt: iso(r.receivedAt),
    finishedAt: iso(r.finishedAt),
    api: r.api,
    keyId: r.keyId,
    accountId: r.accountId,
    model: r.model,
    status: r.status,
    httpStatus: r.httpStatus,
    errorCode: r.errorCode,
    usage: r.usage,
    costMicros: r.cost.costMicros,
    totalMs: r.timings.totalMs,
  };
}

export function toRequestDetail(row: RecordRow): RequestDetail {
  const r = row.record;
  return {
    ...toRequestSummary(row),
    surface: r.surface,
    stream: r.stream,
    configVersion: r.configVersion,
    upstream: r.upstream,
    upstreamModel: r.upstreamModel,
    cost: r.cost,
    timings: r.timings,
    guardrails: r.guardrails,
    attempts: r.attempts,
    bodies: r.bodies,
    ingestedAt: row.ingested_at.toISOString(),
  };
}
