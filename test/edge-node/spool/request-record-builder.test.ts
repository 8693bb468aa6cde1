// The spool stage's record: built from the pipeline context, always valid for the control plane,
// bodies kept only when the spool keeps them and cut to fit MAX_RECORD_JSON_BYTES.
import t from 'tap';
import { MAX_RECORD_JSON_BYTES, requestRecordSchema } from '../../../proto/src/index.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import { spoolStage } from '../../../edge-node/src/pipeline/stages/spool.js';
import { buildRequestRecord, cutToJsonBytes } from '../../../edge-node/src/spool/request-record-builder.js';
import type { RequestRecord } from '../../../proto/src/index.js';
import { quietLogger } from './spool-helpers.js';
import { AbortSwitch } from '../../../edge-node/src/pipeline/abort-switch.js';
import { noCredit } from '../../../edge-node/src/billing/credit-leases.js';

function context(overrides: Partial<PipelineContext> = {}, finalised: RequestRecord[] = [], keepsBodies = true): PipelineContext {
  return {
    requestId: 'req-ctx-1', clientRequestId: null, api: 'chat.completions', surface: 'model', receivedAt: 1_700_000_000_000, startedAt: 1000,
    http: { method: 'POST', path: '/v1/chat/completions', headers: {}, rawHeaders: [], params: {} },
    body: { model: 'echo', messages: [{ role: 'user', content: 'raw secret@example.com' }] },
    forwardBody: { model: 'echo', messages: [{ role: 'user', content: 'raw [EMAIL]' }] },
    deps: {
      nodeId: 'node-1', logger: quietLogger(), credit: noCredit,
      spool: { open: () => undefined, finalise: async (r: RequestRecord) => void finalised.push(r), keepsBodies: () => keepsBodies, fullness: () => 0 },
    } as unknown as PipelineContext['deps'],
    clock: { now: () => 1_700_000_000_250, monotonic: () => 1250, hostMonotonic: () => 1250 },
    callerGone: new AbortSwitch(),
    model: 'echo', stream: true, maxOutputTokens: null, estimatedInputTokens: 3, inputTexts: [],
    key: { id: 'key-1', accountId: 'acct-1', keyLimits: {}, accountLimits: {}, guardrailPolicyId: null, allowedModels: null, allowedToolServers: null },
    attempts: [{ upstream: 'demo', model: 'demo-echo', outcome: 'ok', httpStatus: 200, durationMs: 40 }],
    served: { upstream: 'demo', model: 'demo-echo' },
    upstreamUsage: null, upstreamFirstByteMs: 12, upstreamMs: 40, responseText: 'hello there', responseTextChars: 11, responseTextDenseWeight: 0, guardedTextChars: 0, guardedTextDenseWeight: 0, deliveredInputTokens: 0,
    guardrails: [{ policyId: 'p', rule: 0, detector: 'email', action: 'mask', on: 'input', matches: 1 }],
    usage: { inputTokens: 5, outputTokens: 7, estimated: false },
    cost: { reservedMicros: 100, costMicros: 40, leaseId: 'lease-1', priced: true }, openRowDurable: null,
    responseHeaders: {}, stagesUs: { identify: 10, forward: 40_000 },
    outcome: { status: 'ok', httpStatus: 200, errorCode: null }, cleanups: [], releaseSlot: null,
    ...overrides,
  };
}

t.test('the spool stage finalises a valid record of the request, with the masked body that was forwarded', async (t) => {
  const finalised: RequestRecord[] = [];
  t.equal(await spoolStage.run(context({}, finalised)), undefined);
  const [record] = finalised;
  t.ok(requestRecordSchema.safeParse(record).success, 'passes the control plane schema');
  t.match(record, {
    requestId: 'req-ctx-1', nodeId: 'node-1', keyId: 'key-1', accountId: 'acct-1', stream: true, status: 'ok', upstream: 'demo',
    usage: { inputTokens: 5, outputTokens: 7 }, cost: { costMicros: 40 }, finishedAt: 1_700_000_000_250,
    timings: { totalMs: 250, upstreamFirstByteMs: 12, stagesUs: { identify: 10 } },
    bodies: { response: 'hello there', truncated: false },
  });
  t.match(record!.bodies!.request, /\[EMAIL\]/);
  t.notMatch(record!.bodies!.request, /secret@example\.com/, 'the unmasked text is not kept');
});

t.test('no bodies are kept when the spool does not keep them', async (t) => {
  const finalised: RequestRecord[] = [];
  await spoolStage.run(context({}, finalised, false));
  t.equal(finalised[0]!.bodies, null);
});

t.test('huge bodies are cut so the record stays under the size limit and marked truncated', async (t) => {
  const huge = '"\n'.repeat(600_000);
  const record = buildRequestRecord(context({ forwardBody: { text: huge }, responseText: 'é'.repeat(700_000) }), { keepBodies: true });
  const bytes = Buffer.byteLength(JSON.stringify(record));
  t.ok(bytes <= MAX_RECORD_JSON_BYTES, `${bytes} bytes`);
  t.equal(record.bodies?.truncated, true);
  t.ok(requestRecordSchema.safeParse(record).success);
});

t.test('caller-controlled text longer than the schema allows is clipped rather than making the record invalid', async (t) => {
  const finalised: RequestRecord[] = [];
  await spoolStage.run(context({ model: 'm'.repeat(5000), requestId: 'r'.repeat(128) }, finalised));
  t.equal(finalised[0]!.model?.length, 256);
  t.ok(requestRecordSchema.safeParse(finalised[0]).success);
});

t.test('cutting never splits a surrogate pair and respects the JSON byte budget', async (t) => {
  const { text, cut } = cutToJsonBytes('😀'.repeat(100), 51);
  t.equal(cut, true);
  t.ok(Buffer.byteLength(JSON.stringify(text)) <= 51);
  t.equal(text.length % 2, 0, 'whole emoji only');
  t.same(cutToJsonBytes('short', 100), { text: 'short', cut: false });
});
