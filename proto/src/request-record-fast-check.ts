/**
 * A hand-written check that a parsed JSON value is a request record `requestRecordSchema` accepts
 * unchanged. The control plane validates every record a node sends (hundreds per second per
 * node); the zod pass allocated a result object per field and was a quarter of the control
 * plane's CPU per ingested record (npm run bench:ingest). The schema stays the definition: this
 * answers `true` only for values the schema accepts, returned as they are (strict objects, no
 * transforms, so its output equals its input), and a `false` sends the value to the schema, which
 * decides and explains. A property test (test/proto/request-record-fast-check.property.test.ts)
 * holds the two to the same answer on valid records and on mutations of them.
 */
import {
  MAX_RECORD_UNIX_MS,
  REQUEST_RECORD_SCHEMA_VERSION,
  guardrailVerdictSchema,
  recordStatusSchema,
  requestRecordSchema,
  upstreamAttemptSchema,
} from './request-record.js';
import type { RequestRecord } from './request-record.js';

type Obj = Record<string, unknown>;

// Enum values and key sets read from the schema itself, so neither can drift from it.
const SHAPE = requestRecordSchema.shape;
const SURFACES: ReadonlySet<unknown> = new Set(SHAPE.surface.options);
const APIS: ReadonlySet<unknown> = new Set(SHAPE.api.options);
const STATUSES: ReadonlySet<unknown> = new Set(recordStatusSchema.options);
const OUTCOMES: ReadonlySet<unknown> = new Set(upstreamAttemptSchema.shape.outcome.options);
const ACTIONS: ReadonlySet<unknown> = new Set(guardrailVerdictSchema.shape.action.options);
const SIDES: ReadonlySet<unknown> = new Set(guardrailVerdictSchema.shape.on.options);

const RECORD_KEYS: ReadonlySet<string> = new Set(Object.keys(SHAPE));
const USAGE_KEYS: ReadonlySet<string> = new Set(Object.keys(SHAPE.usage.shape));
const COST_KEYS: ReadonlySet<string> = new Set(Object.keys(SHAPE.cost.shape));
const TIMINGS_KEYS: ReadonlySet<string> = new Set(Object.keys(SHAPE.timings.shape));
const ATTEMPT_KEYS: ReadonlySet<string> = new Set(Object.keys(upstreamAttemptSchema.shape));
const VERDICT_KEYS: ReadonlySet<string> = new Set(Object.keys(guardrailVerdictSchema.shape));
const BODIES_KEYS: ReadonlySet<string> = new Set(['request', 'response', 'truncated']);

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

function isObject(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A plain object whose own keys are all in `keys` and holds `required` of them (strictObject). */
function hasOnlyKeys(v: Obj, keys: ReadonlySet<string>, required: number): boolean {
  let n = 0;
  for (const key in v) {
    if (!keys.has(key) || !Object.hasOwn(v, key)) return false;
    n += 1;
  }
  return n >= required;
}

const str = (v: unknown, min: number, max: number): boolean => typeof v === 'string' && v.length >= min && v.length <= max;
const strOrNull = (v: unknown, min: number, max: number): boolean => v === null || str(v, min, max);
const int = (v: unknown, min: number, max: number): boolean => typeof v === 'number' && Number.isSafeInteger(v) && v >= min && v <= max;
const nonNegative = (v: unknown): boolean => typeof v === 'number' && Number.isFinite(v) && v >= 0;
const nonNegativeOrNull = (v: unknown): boolean => v === null || nonNegative(v);

function isAttempt(v: unknown): boolean {
  return (
    isObject(v) &&
    hasOnlyKeys(v, ATTEMPT_KEYS, ATTEMPT_KEYS.size) &&
    str(v.upstream, 1, 128) &&
    str(v.model, 1, 256) &&
    OUTCOMES.has(v.outcome) &&
    (v.httpStatus === null || int(v.httpStatus, 100, 599)) &&
    nonNegative(v.durationMs)
  );
}

function isVerdict(v: unknown): boolean {
  return (
    isObject(v) &&
    hasOnlyKeys(v, VERDICT_KEYS, VERDICT_KEYS.size) &&
    str(v.policyId, 1, 128) &&
    int(v.rule, 0, MAX_SAFE) &&
    str(v.detector, 1, 32) &&
    ACTIONS.has(v.action) &&
    SIDES.has(v.on) &&
    int(v.matches, 0, MAX_SAFE)
  );
}

function isStagesUs(v: unknown): boolean {
  if (!isObject(v)) return false;
  for (const key in v) {
    if (!Object.hasOwn(v, key) || key.length > 32 || key === '__proto__' || !nonNegative(v[key])) return false;
  }
  return true;
}

function everyOf(v: unknown, max: number, item: (x: unknown) => boolean): boolean {
  if (!Array.isArray(v) || v.length > max) return false;
  for (const x of v) if (!item(x)) return false;
  return true;
}

/** Whether `v` is a record the schema accepts as it is (false: ask the schema). */
export function isPlainValidRecord(v: unknown): v is RequestRecord {
  if (!isObject(v)) return false;
  const hasClientId = Object.hasOwn(v, 'clientRequestId');
  if (!hasOnlyKeys(v, RECORD_KEYS, RECORD_KEYS.size - (hasClientId ? 0 : 1))) return false;
  if (hasClientId && !str(v.clientRequestId, 1, 128)) return false;
  const { usage, cost, timings, bodies } = v;
  return (
    v.schemaVersion === REQUEST_RECORD_SCHEMA_VERSION &&
    str(v.requestId, 1, 128) &&
    str(v.nodeId, 1, 128) &&
    (v.configVersion === null || int(v.configVersion, 0, MAX_SAFE)) &&
    int(v.receivedAt, 0, MAX_RECORD_UNIX_MS) &&
    int(v.finishedAt, 0, MAX_RECORD_UNIX_MS) &&
    SURFACES.has(v.surface) &&
    APIS.has(v.api) &&
    strOrNull(v.keyId, 1, 128) &&
    strOrNull(v.accountId, 1, 128) &&
    strOrNull(v.model, 0, 256) &&
    strOrNull(v.upstream, 0, 128) &&
    strOrNull(v.upstreamModel, 0, 256) &&
    typeof v.stream === 'boolean' &&
    STATUSES.has(v.status) &&
    int(v.httpStatus, 0, 599) &&
    strOrNull(v.errorCode, 0, 64) &&
    isObject(usage) &&
    hasOnlyKeys(usage, USAGE_KEYS, USAGE_KEYS.size) &&
    int(usage.inputTokens, 0, MAX_SAFE) &&
    int(usage.outputTokens, 0, MAX_SAFE) &&
    typeof usage.estimated === 'boolean' &&
    isObject(cost) &&
    hasOnlyKeys(cost, COST_KEYS, COST_KEYS.size) &&
    int(cost.reservedMicros, 0, MAX_SAFE) &&
    int(cost.costMicros, 0, MAX_SAFE) &&
    strOrNull(cost.leaseId, 0, 128) &&
    typeof cost.priced === 'boolean' &&
    isObject(timings) &&
    hasOnlyKeys(timings, TIMINGS_KEYS, TIMINGS_KEYS.size) &&
    nonNegative(timings.totalMs) &&
    nonNegativeOrNull(timings.upstreamFirstByteMs) &&
    nonNegativeOrNull(timings.upstreamMs) &&
    isStagesUs(timings.stagesUs) &&
    everyOf(v.attempts, 64, isAttempt) &&
    everyOf(v.guardrails, 400, isVerdict) &&
    (bodies === null ||
      (isObject(bodies) &&
        hasOnlyKeys(bodies, BODIES_KEYS, BODIES_KEYS.size) &&
        (bodies.request === null || typeof bodies.request === 'string') &&
        (bodies.response === null || typeof bodies.response === 'string') &&
        typeof bodies.truncated === 'boolean'))
  );
}
