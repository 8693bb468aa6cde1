/**
 * Builds a request's final record from its pipeline context (the spool stage calls this). The
 * record must pass requestRecordSchema: the control plane sets an invalid one aside, unbilled.
 * It is valid by construction rather than checked here (a zod pass per request was ≈ 5% of the
 * node's CPU): every field is clamped to the schema's bounds below, and a property test
 * (test/edge-node/spool/request-record-validity.property.test.ts) feeds arbitrary contexts through this
 * builder and the schema. Bodies are cut so the record JSON stays under MAX_RECORD_JSON_BYTES.
 */
import { MAX_RECORD_JSON_BYTES, MAX_RECORD_UNIX_MS, REQUEST_RECORD_SCHEMA_VERSION } from '../../../proto/src/index.js';
import type { GuardrailVerdict, RequestRecord, UpstreamAttempt } from '../../../proto/src/index.js';
import { holdsUnmaskedInput } from '../guardrails/policy-engine.js';
import type { PipelineContext } from '../pipeline/context.js';

/** Room left for JSON framing and escapes beyond the measured parts. */
const SLACK_BYTES = 4096;
const MAX_ATTEMPTS = 64;
const MAX_VERDICTS = 400;

/** Bodies whose JSON cannot exceed this (6 bytes per UTF-16 unit at worst, `\\uXXXX`) need no measuring. */
const FAST_BODY_CHARS = Math.floor((MAX_RECORD_JSON_BYTES / 2 - SLACK_BYTES) / 6);

const clip = (value: string | null | undefined, max: number): string | null => (value == null ? null : value.length > max ? value.slice(0, max) : value);
/** A non-empty string of at most `max` characters (schema `min(1).max(max)`). */
const nonEmpty = (value: string, max: number): string => (value.length === 0 ? '?' : value.length > max ? value.slice(0, max) : value);
const nonNegative = (n: number | null): number | null => (n === null || !Number.isFinite(n) ? null : Math.max(0, n));
const duration = (n: number): number => (Number.isFinite(n) ? Math.max(0, n) : 0);
/** A whole number in 0..MAX_SAFE_INTEGER (counts, micro-units). */
const whole = (n: number): number => (Number.isFinite(n) ? Math.min(Number.MAX_SAFE_INTEGER, Math.max(0, Math.round(n))) : 0);
/** A unix-ms time the control plane can store (0..MAX_RECORD_UNIX_MS): a wild clock must not get the record set aside. */
const unixMs = (n: number): number => Math.min(MAX_RECORD_UNIX_MS, whole(n));

function attemptOf(a: UpstreamAttempt): UpstreamAttempt {
  return {
    upstream: nonEmpty(a.upstream, 128),
    model: nonEmpty(a.model, 256),
    outcome: a.outcome,
    httpStatus: a.httpStatus !== null && Number.isInteger(a.httpStatus) && a.httpStatus >= 100 && a.httpStatus <= 599 ? a.httpStatus : null,
    durationMs: duration(a.durationMs),
  };
}

function verdictOf(v: GuardrailVerdict): GuardrailVerdict {
  return { policyId: nonEmpty(v.policyId, 128), rule: whole(v.rule), detector: nonEmpty(v.detector, 32), action: v.action, on: v.on, matches: whole(v.matches) };
}

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

/** Bodies a provider recorded as what it sends, when ctx.forwardBody cannot hold it (an MCP batch is an array). */
const sentBodies = new WeakMap<PipelineContext, unknown>();

/** The body to record for `ctx`: what is sent, so input guardrails' masks are in the record. */
export function recordRequestBody(ctx: PipelineContext, body: unknown): void {
  sentBodies.set(ctx, body);
}

/** Bodies a provider sent as the caller's own text (MCP), recorded as that text. */
const sentTexts = new WeakMap<PipelineContext, string>();

/** The body to record for `ctx` as the text that was sent, when that is the caller's text rather than a serialised body. */
export function recordRequestBodyText(ctx: PipelineContext, text: string): void {
  sentTexts.set(ctx, text);
}

function requestBodyText(ctx: PipelineContext): string | null {
  // The caller's text before the masks its key's input rules were to write: never kept.
  if (holdsUnmaskedInput(ctx)) return null;
  const sent = sentTexts.get(ctx);
  if (sent !== undefined) return sent;
  // What was forwarded (after input guardrails masked it), else what arrived (the masks are not in that).
  const body = sentBodies.get(ctx) ?? ctx.forwardBody ?? (ctx.inputChecked === true ? undefined : ctx.body);
  if (body === undefined) return null;
  try {
    return JSON.stringify(body) ?? null;
  } catch {
    return null;
  }
}

export function buildRequestRecord(ctx: PipelineContext, opts: { keepBodies: boolean }): RequestRecord {
  const receivedAt = unixMs(ctx.receivedAt);
  const finishedAt = Math.max(receivedAt, unixMs(ctx.clock.now()));
  const stagesUs: Record<string, number> = {};
  for (const name in ctx.stagesUs) {
    const us = ctx.stagesUs[name as keyof typeof ctx.stagesUs];
    if (typeof us === 'number' && Number.isFinite(us)) stagesUs[name.slice(0, 32)] = Math.max(0, us);
  }
  const attempts = ctx.attempts.length > MAX_ATTEMPTS ? ctx.attempts.slice(0, MAX_ATTEMPTS) : ctx.attempts;
  const verdicts = ctx.guardrails.length > MAX_VERDICTS ? ctx.guardrails.slice(0, MAX_VERDICTS) : ctx.guardrails;
  const { outcome, usage, cost } = ctx;
  // A refused key (revoked, expired, a suspended account's) is named too: who still tries it is an audit signal.
  const key = ctx.key ?? ctx.presentedKey;
  const record: RequestRecord = {
    schemaVersion: REQUEST_RECORD_SCHEMA_VERSION,
    requestId: nonEmpty(ctx.requestId, 128),
    nodeId: nonEmpty(ctx.deps.nodeId, 128),
    configVersion: ctx.config?.version == null ? null : whole(ctx.config.version),
    receivedAt,
    finishedAt,
    surface: ctx.surface,
    api: ctx.api,
    keyId: key?.id == null || key.id === '' ? null : clip(key.id, 128),
    accountId: key?.accountId == null || key.accountId === '' ? null : clip(key.accountId, 128),
    model: clip(ctx.model, 256),
    upstream: clip(ctx.served?.upstream, 128),
    upstreamModel: clip(ctx.served?.model, 256),
    stream: ctx.stream,
    status: outcome.status,
    httpStatus: Number.isInteger(outcome.httpStatus) && outcome.httpStatus >= 0 && outcome.httpStatus <= 599 ? outcome.httpStatus : 500,
    errorCode: clip(outcome.errorCode, 64),
    usage: { inputTokens: whole(usage.inputTokens), outputTokens: whole(usage.outputTokens), estimated: usage.estimated },
    cost: { reservedMicros: whole(cost.reservedMicros), costMicros: whole(cost.costMicros), leaseId: clip(cost.leaseId, 128), priced: cost.priced },
    timings: {
      totalMs: duration(ctx.clock.monotonic() - ctx.startedAt),
      upstreamFirstByteMs: nonNegative(ctx.upstreamFirstByteMs),
      upstreamMs: nonNegative(ctx.upstreamMs),
      stagesUs,
    },
    attempts: attempts.map(attemptOf),
    guardrails: verdicts.map(verdictOf),
    bodies: null,
  };
  if (ctx.clientRequestId !== null) record.clientRequestId = nonEmpty(ctx.clientRequestId, 128);
  if (opts.keepBodies) record.bodies = bodiesOf(ctx, record);
  return record;
}

function bodiesOf(ctx: PipelineContext, record: RequestRecord): NonNullable<RequestRecord['bodies']> {
  const request = requestBodyText(ctx);
  const response = ctx.responseText === '' ? null : ctx.responseText;
  // Small bodies (nearly all) fit whatever they contain: no measuring, no cutting.
  if ((request?.length ?? 0) + (response?.length ?? 0) <= FAST_BODY_CHARS) return { request, response, truncated: false };
  const base = Buffer.byteLength(JSON.stringify(record), 'utf8');
  const budget = Math.max(0, MAX_RECORD_JSON_BYTES - base - SLACK_BYTES);
  // The request gets half the room first; the response gets whatever the request left.
  const req = request === null ? null : cutToJsonBytes(request, Math.floor(budget / 2));
  const used = req === null ? 0 : Buffer.byteLength(JSON.stringify(req.text), 'utf8');
  const res = response === null ? null : cutToJsonBytes(response, budget - used);
  return { request: req?.text ?? null, response: res?.text ?? null, truncated: (req?.cut ?? false) || (res?.cut ?? false) };
}
