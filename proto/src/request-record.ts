/**
 * One request as the node records it: the row its spool keeps until the control plane has
 * acknowledged it, and the JSON in `RecordBatch.records[].record_json`. Both sides read this one
 * schema: the node builds records with it, the control plane validates every ingested record with
 * it (a record that does not parse is refused, never guessed at). Money is integer micro-units,
 * times are unix ms, durations are microseconds (`…Us`) or milliseconds (`…Ms`) as named.
 */
import { z } from 'zod';

/** Bumped when a field changes meaning; new optional fields do not bump it. */
export const REQUEST_RECORD_SCHEMA_VERSION = 1;
/** One record's JSON may not be larger than this (bodies are cut to fit first). */
export const MAX_RECORD_JSON_BYTES = 1024 * 1024;
/**
 * The latest time a record may carry (9999-12-31T23:59:59.999Z): the control plane files records
 * in monthly partitions bounded by ISO dates, and neither JavaScript's Date (±8.64e15 ms) nor
 * those bounds go much further. A later time passed the schema but failed its batch's ingestion
 * on every resend, so it held up every record behind it; the schema now rejects it instead.
 */
export const MAX_RECORD_UNIX_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

const id = z.string().min(1).max(128);
const count = z.int().min(0).max(Number.MAX_SAFE_INTEGER);
const micros = z.int().min(0).max(Number.MAX_SAFE_INTEGER);
const unixMs = z.int().min(0).max(MAX_RECORD_UNIX_MS);

export const recordStatusSchema = z.enum([
  /** Answered in full (2xx). */
  'ok',
  /** Refused by the node before forwarding (auth, surface, limits, guardrails, credit, spool full, bad request). */
  'rejected',
  /** Forwarded, but the upstream failed (after fallbacks and retries) or the node failed. */
  'failed',
  /** The caller went away before the answer was complete; partial usage is metered. */
  'aborted',
  /** The node stopped (crash, kill -9) while the request was open; finalised at the next start. */
  'interrupted',
]);

export const guardrailVerdictSchema = z.strictObject({
  policyId: id,
  /** Index of the rule in the policy. */
  rule: z.int().min(0),
  detector: z.string().min(1).max(32),
  action: z.enum(['block', 'mask', 'flag']),
  on: z.enum(['input', 'output']),
  /** How many matches; the matched text itself is never recorded. */
  matches: count,
});

export const upstreamAttemptSchema = z.strictObject({
  upstream: z.string().min(1).max(128),
  model: z.string().min(1).max(256),
  /** ok, or why the attempt failed: connect, timeout, status (with httpStatus), aborted. */
  outcome: z.enum(['ok', 'connect', 'timeout', 'status', 'aborted', 'error']),
  httpStatus: z.int().min(100).max(599).nullable(),
  durationMs: z.number().min(0),
});

export const requestRecordSchema = z.strictObject({
  schemaVersion: z.literal(REQUEST_RECORD_SCHEMA_VERSION),
  /** Minted by the node; the key of the record and of its charge, end to end. */
  requestId: z.string().min(1).max(128),
  /** The caller's own id for the request (x-client-request-id or x-request-id), when it sent one: not unique. */
  clientRequestId: z.string().min(1).max(128).optional(),
  /** The node that served it (its id at the time, kept across --reenroll). */
  nodeId: id,
  /** The config bundle version it was served on (null: the node had none). */
  configVersion: z.int().min(0).nullable(),
  receivedAt: unixMs,
  finishedAt: unixMs,
  surface: z.enum(['model', 'tools']),
  /** chat.completions, embeddings, models, messages, mcp. */
  api: z.enum(['chat.completions', 'embeddings', 'models', 'messages', 'mcp']),
  keyId: id.nullable(),
  accountId: id.nullable(),
  /** The alias (or tool server) the caller asked for. */
  model: z.string().max(256).nullable(),
  /** The upstream and its model that produced the answer (null: none did). */
  upstream: z.string().max(128).nullable(),
  upstreamModel: z.string().max(256).nullable(),
  stream: z.boolean(),
  status: recordStatusSchema,
  httpStatus: z.int().min(0).max(599),
  /** The ZN_ERR_* code the caller saw (or the stream ended with); null when ok. */
  errorCode: z.string().max(64).nullable(),
  usage: z.strictObject({
    inputTokens: count,
    outputTokens: count,
    /** True when the upstream gave no usage and the node estimated it. */
    estimated: z.boolean(),
  }),
  cost: z.strictObject({
    /** What was pre-authorised from the lease. */
    reservedMicros: micros,
    /** What the account is charged for this request. */
    costMicros: micros,
    leaseId: z.string().max(128).nullable(),
    /** False when the model had no price (cost 0). */
    priced: z.boolean(),
  }),
  timings: z.strictObject({
    totalMs: z.number().min(0),
    /** From sending upstream to the first byte back (null: not forwarded). */
    upstreamFirstByteMs: z.number().min(0).nullable(),
    upstreamMs: z.number().min(0).nullable(),
    /** Time spent in each pipeline stage, microseconds, by stage name. */
    stagesUs: z.record(z.string().max(32), z.number().min(0)),
  }),
  attempts: z.array(upstreamAttemptSchema).max(64),
  guardrails: z.array(guardrailVerdictSchema).max(400),
  /** Bodies when the spool keeps them (not in metering-only mode); cut to a size limit. */
  bodies: z.strictObject({ request: z.string().nullable(), response: z.string().nullable(), truncated: z.boolean() }).nullable(),
});

export type RequestRecord = z.infer<typeof requestRecordSchema>;
export type RecordStatus = z.infer<typeof recordStatusSchema>;
export type GuardrailVerdict = z.infer<typeof guardrailVerdictSchema>;
export type UpstreamAttempt = z.infer<typeof upstreamAttemptSchema>;
