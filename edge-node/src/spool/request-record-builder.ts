/**
 * Builds a request's final record from its pipeline context (the spool stage calls this). The
 * record must pass requestRecordSchema here, on the node: the control plane refuses a batch with
 * an invalid record, so anything caller-controlled is cut to the schema's limits and the bodies
 * are cut so the record JSON stays under MAX_RECORD_JSON_BYTES.
 */
import { MAX_RECORD_JSON_BYTES, REQUEST_RECORD_SCHEMA_VERSION, requestRecordSchema } from '../../../proto/src/index.js';
import type { RequestRecord } from '../../../proto/src/index.js';
import type { PipelineContext } from '../pipeline/context.js';

/** Room left for JSON framing and escapes beyond the measured parts. */
const SLACK_BYTES = 4096;
const MAX_ATTEMPTS = 64;
const MAX_VERDICTS = 400;

const clip = (value: string | null | undefined, max: number): string | null => (value == null ? null : value.slice(0, max));
const nonNegative = (n: number | null): number | null => (n === null || !Number.isFinite(n) ? null : Math.max(0, n));

/** The longest prefix of `text` whose JSON string form fits in `maxBytes`. */
export function cutToJsonBytes(text: string, maxBytes: number): { text: string; cut: boolean } {
  if (maxBytes <= 2) return { text: '', cut: text.length > 0 };
  if (Buffer.byteLength(JSON.stringify(text), 'utf8') <= maxBytes) return { text, cut: false };
  let low = 0;
  let high = Math.min(text.length, maxBytes);
  // Binary search on the prefix length: escapes make bytes per character vary.
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (Buffer.byteLength(JSON.stringify(text.slice(0, mid)), 'utf8') <= maxBytes) low = mid;
    else high = mid - 1;
  }
  let end = low;
  // Never split a surrogate pair.
  const last = text.charCodeAt(end - 1);
  if (end > 0 && last >= 0xd800 && last <= 0xdbff) end -= 1;
  return { text: text.slice(0, end), cut: true };
}

function requestBodyText(ctx: PipelineContext): string | null {
  // What was forwarded (after input guardrails masked it), else what arrived.
  const body = ctx.forwardBody ?? ctx.body;
  if (body === undefined) return null;
  try {
    return JSON.stringify(body) ?? null;
  } catch {
    return null;
  }
}

export function buildRequestRecord(ctx: PipelineContext, opts: { keepBodies: boolean }): RequestRecord {
  const finishedAt = Math.max(ctx.receivedAt, Math.floor(ctx.clock.now()));
  const stagesUs: Record<string, number> = {};
  for (const [name, us] of Object.entries(ctx.stagesUs)) if (typeof us === 'number' && Number.isFinite(us)) stagesUs[name] = Math.max(0, us);
  const record: RequestRecord = {
    schemaVersion: REQUEST_RECORD_SCHEMA_VERSION,
    requestId: ctx.requestId.slice(0, 128),
    nodeId: ctx.deps.nodeId,
    configVersion: ctx.config?.version ?? null,
    receivedAt: ctx.receivedAt,
    finishedAt,
    surface: ctx.surface,
    api: ctx.api,
    keyId: clip(ctx.key?.id, 128),
    accountId: clip(ctx.key?.accountId, 128),
    model: clip(ctx.model, 256),
    upstream: clip(ctx.served?.upstream, 128),
    upstreamModel: clip(ctx.served?.model, 256),
    stream: ctx.stream,
    status: ctx.outcome.status,
    httpStatus: ctx.outcome.httpStatus,
    errorCode: ctx.outcome.errorCode,
    usage: { ...ctx.usage },
    cost: { ...ctx.cost },
    timings: {
      totalMs: Math.max(0, ctx.clock.monotonic() - ctx.startedAt),
      upstreamFirstByteMs: nonNegative(ctx.upstreamFirstByteMs),
      upstreamMs: nonNegative(ctx.upstreamMs),
      stagesUs,
    },
    attempts: ctx.attempts.slice(0, MAX_ATTEMPTS),
    guardrails: ctx.guardrails.slice(0, MAX_VERDICTS),
    bodies: null,
  };
  if (opts.keepBodies) {
    const base = Buffer.byteLength(JSON.stringify(record), 'utf8');
    const budget = Math.max(0, MAX_RECORD_JSON_BYTES - base - SLACK_BYTES);
    const request = requestBodyText(ctx);
    const response = ctx.responseText === '' ? null : ctx.responseText;
    // The request gets half the room first; the response gets whatever the request left.
    const req = request === null ? null : cutToJsonBytes(request, Math.floor(budget / 2));
    const used = req === null ? 0 : Buffer.byteLength(JSON.stringify(req.text), 'utf8');
    const res = response === null ? null : cutToJsonBytes(response, budget - used);
    record.bodies = { request: req?.text ?? null, response: res?.text ?? null, truncated: (req?.cut ?? false) || (res?.cut ?? false) };
  }
  return record;
}

/**
 * The record as the control plane will check it; a record that would be refused there is
 * reduced to what always passes (no attempts, verdicts or bodies) rather than block the backlog.
 */
export function validRequestRecord(record: RequestRecord): { record: RequestRecord; reduced: string | null } {
  const parsed = requestRecordSchema.safeParse(record);
  if (parsed.success) return { record, reduced: null };
  const reason = parsed.error.issues.slice(0, 3).map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
  const reduced: RequestRecord = { ...record, attempts: [], guardrails: [], bodies: null, timings: { ...record.timings, stagesUs: {} } };
  return { record: reduced, reduced: reason };
}
