// The record builder is valid by construction (the spool stage no longer re-validates each record):
// whatever a pipeline context holds — empty or overlong strings, NaN, negative or fractional
// numbers, too many attempts or verdicts, odd HTTP statuses — the record passes the control
// plane's schema and stays under the size limit.
import fc from 'fast-check';
import t from 'tap';
import { MAX_RECORD_JSON_BYTES, MAX_RECORD_UNIX_MS, requestRecordSchema } from '../../../proto/src/index.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import { buildRequestRecord } from '../../../edge-node/src/spool/request-record-builder.js';
import { quietLogger } from './spool-helpers.js';
import { AbortSwitch } from '../../../edge-node/src/pipeline/abort-switch.js';

const anyText = fc.oneof(fc.constant(''), fc.string({ maxLength: 40 }), fc.string({ minLength: 200, maxLength: 600 }));
const anyNumber = fc.oneof(
  fc.integer({ min: -1000, max: 1_000_000 }),
  fc.double({ noNaN: false }),
  fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, Number.MAX_SAFE_INTEGER * 4, -0, 0.5),
  // Times the control plane cannot store: year 10000, and beyond JavaScript's Date range.
  fc.constantFrom(MAX_RECORD_UNIX_MS + 1, Date.UTC(10000, 0, 1), 8.7e15, Number.MAX_SAFE_INTEGER),
);
const attempt = fc.record({
  upstream: anyText,
  model: anyText,
  outcome: fc.constantFrom('ok', 'connect', 'timeout', 'status', 'aborted', 'error'),
  httpStatus: fc.oneof(fc.constant(null), anyNumber),
  durationMs: anyNumber,
});
const verdict = fc.record({
  policyId: anyText,
  rule: anyNumber,
  detector: anyText,
  action: fc.constantFrom('block', 'mask', 'flag'),
  on: fc.constantFrom('input', 'output'),
  matches: anyNumber,
});

const contextArb = fc.record({
  requestId: fc.oneof(fc.string({ minLength: 1, maxLength: 20 }), fc.string({ minLength: 129, maxLength: 300 })),
  clientRequestId: fc.oneof(fc.constant(null), fc.string({ minLength: 1, maxLength: 20 }), fc.string({ minLength: 129, maxLength: 300 })),
  nodeId: fc.oneof(fc.constant('node-1'), fc.string({ minLength: 129, maxLength: 200 })),
  receivedAt: anyNumber,
  now: anyNumber,
  startedAt: anyNumber,
  monotonic: anyNumber,
  keyId: fc.oneof(fc.constant(undefined), anyText),
  accountId: fc.oneof(fc.constant(null), anyText),
  // A refused key (revoked, expired…) is only the presented one: the record names it all the same.
  keyRefused: fc.boolean(),
  model: fc.oneof(fc.constant(null), anyText, fc.string({ minLength: 257, maxLength: 400 })),
  served: fc.oneof(fc.constant(undefined), fc.record({ upstream: anyText, model: anyText })),
  httpStatus: anyNumber,
  errorCode: fc.oneof(fc.constant(null), fc.string({ maxLength: 100 })),
  usage: fc.record({ inputTokens: anyNumber, outputTokens: anyNumber, estimated: fc.boolean() }),
  cost: fc.record({ reservedMicros: anyNumber, costMicros: anyNumber, leaseId: fc.oneof(fc.constant(null), anyText), priced: fc.boolean() }),
  firstByte: fc.oneof(fc.constant(null), anyNumber),
  upstreamMs: fc.oneof(fc.constant(null), anyNumber),
  stageUs: anyNumber,
  attempts: fc.array(attempt, { maxLength: 80 }),
  verdicts: fc.array(verdict, { maxLength: 450 }),
  configVersion: fc.oneof(fc.constant(null), anyNumber),
  responseText: fc.oneof(fc.constant(''), fc.string({ maxLength: 100 }), fc.constant('"\\\n'.repeat(200_000))),
  keepBodies: fc.boolean(),
});

t.test('every record the builder makes passes the control plane schema and the size limit', async (t) => {
  fc.assert(
    fc.property(contextArb, (c) => {
      const ctx = {
        requestId: c.requestId, clientRequestId: c.clientRequestId, api: 'chat.completions', surface: 'model', receivedAt: c.receivedAt, startedAt: c.startedAt,
        http: { method: 'POST', path: '/v1/chat/completions', headers: {}, rawHeaders: [], params: {} },
        body: { model: 'echo', messages: [{ role: 'user', content: 'hello' }] },
        deps: { nodeId: c.nodeId, logger: quietLogger() },
        clock: { now: () => c.now, monotonic: () => c.monotonic },
        callerGone: new AbortSwitch(),
        config: c.configVersion === null ? undefined : { version: c.configVersion },
        model: c.model, stream: false, maxOutputTokens: null, estimatedInputTokens: 0, inputTexts: [],
        ...(c.keyId === undefined ? {} : { [c.keyRefused ? 'presentedKey' : 'key']: { id: c.keyId, accountId: c.accountId } }),
        attempts: c.attempts, served: c.served, upstreamUsage: null,
        upstreamFirstByteMs: c.firstByte, upstreamMs: c.upstreamMs, responseText: c.responseText,
        guardrails: c.verdicts, usage: c.usage, cost: c.cost, responseHeaders: {},
        stagesUs: { identify: c.stageUs, forward: 5 },
        outcome: { status: 'failed', httpStatus: c.httpStatus, errorCode: c.errorCode }, cleanups: [],
      } as unknown as PipelineContext;
      const record = buildRequestRecord(ctx, { keepBodies: c.keepBodies });
      const parsed = requestRecordSchema.safeParse(record);
      if (!parsed.success) throw new Error(parsed.error.issues.slice(0, 3).map((i) => `${i.path.join('.')}: ${i.message}`).join('; '));
      return Buffer.byteLength(JSON.stringify(record)) <= MAX_RECORD_JSON_BYTES;
    }),
    { numRuns: 300 },
  );
  t.pass('300 arbitrary contexts made valid records');
});
