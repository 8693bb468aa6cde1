// What the spool keeps of requests refused before anything went upstream: no bodies (the caller's
// text is no billable call, and without a key anyone's), but for the masked body of a keyed request
// an input guardrail blocked while the spool has room (once its input rules ran over all of it:
// before that, the body is unmasked); and nothing at all of a refusal without a
// valid key once the spool is at 90 % of its quota (counted, one warning per interval), so callers
// without a key can no longer fill the spool and get keyed callers refused ZN_ERR_SPOOL_FULL.
// A key the node recognised but refused (revoked, expired, a suspended account's) is named in its
// refusal's record, uncharged, under the same 90 % rule: who still tries a revoked key shows.
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { noCredit } from '../../../edge-node/src/billing/credit-leases.js';
import type { ErrorCode } from '../../../edge-node/src/errors.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { createNodePipelineMetrics } from '../../../edge-node/src/metrics/node-pipeline-metrics.js';
import { AbortSwitch } from '../../../edge-node/src/pipeline/abort-switch.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import type { PipelineDeps } from '../../../edge-node/src/pipeline/deps.js';
import { newPipelineContext } from '../../../edge-node/src/pipeline/new-context.js';
import { DROPPED_RECORDS_WARNING_MS, spoolStage } from '../../../edge-node/src/pipeline/stages/spool.js';
import type { RequestSpool } from '../../../edge-node/src/spool/request-spool.js';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import type { SpoolLimits } from '../../../edge-node/src/spool/spool-store.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { bundleKey, newCallerKey } from '../config-fixtures.js';
import { policy } from '../guardrails/guardrail-fixtures.js';
import { parsePrometheusText, sampleValue } from '../metrics/prometheus-text.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import { ManualClock } from '../rate-limit/limit-fixtures.js';
import { quietLogger, tempStateDir } from './spool-helpers.js';

const KEY = { id: 'key-1', accountId: 'acct-1', keyLimits: {}, accountLimits: {}, guardrailPolicyId: null, allowedModels: null, allowedToolServers: null };

/** A spool double: records kept in memory, fullness and keepsBodies as the test sets them. */
function fakeSpool(state: { fullness: number; keepsBodies: boolean }): RequestSpool & { records: RequestRecord[] } {
  const records: RequestRecord[] = [];
  return { records, open: () => undefined, finalise: async (r) => void records.push(r), keepsBodies: () => state.keepsBodies, fullness: () => state.fullness };
}

interface Harness {
  spool: ReturnType<typeof fakeSpool>;
  state: { fullness: number; keepsBodies: boolean };
  clock: ManualClock;
  warnings: () => Array<Record<string, unknown>>;
  scrape: () => ReturnType<typeof parsePrometheusText>;
  /** A request that ended with `outcome`, keyed or not, forwarded (one attempt) or not. */
  finished(opts: { key: boolean; code: ErrorCode | null; status?: PipelineContext['outcome']['status']; forwarded?: boolean }): PipelineContext;
}

function harness(): Harness {
  const state = { fullness: 0, keepsBodies: true };
  const spool = fakeSpool(state);
  const clock = new ManualClock();
  const lines: string[] = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(line) } });
  const metrics = createNodePipelineMetrics(() => ({ spoolBytes: 0, backfillBacklog: 0 }));
  const deps = { nodeId: 'node-1', logger, credit: noCredit, spool, metrics } as unknown as PipelineDeps;
  let n = 0;
  return {
    spool,
    state,
    clock,
    warnings: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.level === 'warn' || l.level === 40),
    scrape: () => parsePrometheusText(metrics.render()),
    finished(opts) {
      n += 1;
      const ctx = newPipelineContext({
        requestId: `req-${n}`,
        api: 'chat.completions',
        surface: 'model',
        http: { method: 'POST', path: '/v1/chat/completions', headers: {}, rawHeaders: [], params: {} },
        body: { model: 'echo', messages: [{ role: 'user', content: 'the caller text' }] },
        deps,
        clock,
        callerGone: new AbortSwitch(),
      });
      if (opts.key) ctx.key = KEY;
      if (opts.forwarded === true) ctx.attempts.push({ upstream: 'demo', model: 'demo-echo', outcome: 'ok', httpStatus: 200, durationMs: 5 });
      const status = opts.status ?? (opts.code === null ? 'ok' : 'rejected');
      ctx.outcome = { status, httpStatus: opts.code === null ? 200 : 400, errorCode: opts.code };
      return ctx;
    },
  };
}

t.test('a request refused before forwarding keeps no bodies in its record, keyed or not', async (t) => {
  const h = harness();
  for (const ctx of [
    h.finished({ key: false, code: 'ZN_ERR_API_KEY_MISSING' }),
    h.finished({ key: false, code: 'ZN_ERR_API_KEY_INVALID' }),
    h.finished({ key: false, code: 'ZN_ERR_INVALID_REQUEST' }),
    h.finished({ key: false, code: null, status: 'aborted' }),
    h.finished({ key: true, code: 'ZN_ERR_RATE_LIMITED' }),
    h.finished({ key: true, code: 'ZN_ERR_CREDIT_EXHAUSTED' }),
    h.finished({ key: true, code: 'ZN_ERR_GUARDRAIL_UNCHECKABLE' }),
  ]) {
    await spoolStage.run(ctx);
  }
  t.equal(h.spool.records.length, 7, 'every one is recorded');
  t.same(h.spool.records.map((r) => r.bodies), [null, null, null, null, null, null, null]);
});

t.test("a keyed request an input guardrail blocked keeps its body while the spool is not full, whatever the policy says of forwarded ones", async (t) => {
  const h = harness();
  await spoolStage.run(h.finished({ key: true, code: 'ZN_ERR_GUARDRAIL_BLOCKED' }));
  t.match(h.spool.records[0]?.bodies, { request: /the caller text/ }, 'kept as audit evidence');
  h.state.fullness = 1;
  await spoolStage.run(h.finished({ key: true, code: 'ZN_ERR_GUARDRAIL_BLOCKED' }));
  t.equal(h.spool.records[1]?.bodies, null, 'not once the spool is full, also under reject (keepsBodies true)');
  t.equal(h.spool.records.length, 2, 'a keyed refusal is recorded when full');
});

t.test("a request whose key's input rules did not run over it keeps no request body, forwarded or blocked: the caller's text is unmasked", async (t) => {
  const h = harness();
  const config = { guardrailPolicies: new Map([['p', policy('p', [{ detector: 'email', action: 'mask', on: 'input' }])]]) } as unknown as PipelineContext['config'];
  const guarded = (ctx: PipelineContext): PipelineContext => Object.assign(ctx, { key: { ...KEY, guardrailPolicyId: 'p' }, config });
  await spoolStage.run(guarded(h.finished({ key: true, code: null, forwarded: true })));
  await spoolStage.run(guarded(h.finished({ key: true, code: 'ZN_ERR_GUARDRAIL_BLOCKED' })));
  const checked = guarded(h.finished({ key: true, code: null, forwarded: true }));
  checked.inputChecked = true;
  checked.forwardBody = { model: 'echo', messages: [{ role: 'user', content: 'the masked text' }] };
  await spoolStage.run(checked);
  t.match(h.spool.records.map((r) => r.bodies), [{ request: null }, null, { request: /the masked text/ }]);
  t.notMatch(JSON.stringify(h.spool.records), /the caller text/, 'never the body as received');
});

t.test('forwarded requests keep their bodies as the spool says, full or not', async (t) => {
  const h = harness();
  h.state.fullness = 2;
  await spoolStage.run(h.finished({ key: true, code: null, forwarded: true }));
  await spoolStage.run(h.finished({ key: true, code: 'ZN_ERR_UPSTREAM_ERROR', status: 'failed', forwarded: true }));
  h.state.keepsBodies = false;
  await spoolStage.run(h.finished({ key: true, code: null, forwarded: true }));
  t.match(h.spool.records.map((r) => r.bodies), [{ request: /the caller text/ }, { request: /the caller text/ }, null]);
});

t.test('at 90 % of the quota a refusal without a valid key is not recorded: counted by code, one warning per interval', async (t) => {
  const h = harness();
  h.state.fullness = 0.89;
  await spoolStage.run(h.finished({ key: false, code: 'ZN_ERR_API_KEY_MISSING' }));
  t.equal(h.spool.records.length, 1, 'below 90 %: recorded (without bodies)');

  h.state.fullness = 0.9;
  for (let i = 0; i < 5; i++) await spoolStage.run(h.finished({ key: false, code: 'ZN_ERR_API_KEY_MISSING' }));
  await spoolStage.run(h.finished({ key: false, code: 'ZN_ERR_API_KEY_INVALID' }));
  await spoolStage.run(h.finished({ key: true, code: 'ZN_ERR_RATE_LIMITED' }));
  await spoolStage.run(h.finished({ key: true, code: null, forwarded: true }));
  t.same(
    h.spool.records.slice(1).map((r) => [r.keyId, r.errorCode]),
    [['key-1', 'ZN_ERR_RATE_LIMITED'], ['key-1', null]],
    "keyed requests' records are never dropped",
  );
  const parsed = h.scrape();
  t.equal(sampleValue(parsed, 'zenova_node_spool_dropped_records_total', { reason: 'ZN_ERR_API_KEY_MISSING' }), 5);
  t.equal(sampleValue(parsed, 'zenova_node_spool_dropped_records_total', { reason: 'ZN_ERR_API_KEY_INVALID' }), 1);
  t.equal(h.warnings().length, 1, 'one warning for six records not written');

  h.clock.advance(DROPPED_RECORDS_WARNING_MS - 1);
  await spoolStage.run(h.finished({ key: false, code: 'ZN_ERR_API_KEY_MISSING' }));
  t.equal(h.warnings().length, 1, 'none within the interval');
  h.clock.advance(1);
  await spoolStage.run(h.finished({ key: false, code: 'ZN_ERR_API_KEY_MISSING' }));
  t.equal(h.warnings().length, 2, 'the next one after it');
  t.match(h.warnings()[1], { dropped: 7 }, 'it counts the six records not written since the first warning, and its own');
  t.equal(h.spool.records.length, 3);
});

t.test('over HTTP: a refusal of a revoked, expired or suspended-account key names the key and its account in its record, uncharged', async (t) => {
  const upstream = await startFakeUpstream(t);
  const [revoked, expired, suspended, unknown] = [newCallerKey(), newCallerKey(), newCallerKey(), newCallerKey()];
  const state = { fullness: 0, keepsBodies: true };
  const spool = fakeSpool(state);
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    services: { spool },
    bundle: (base) => ({
      accounts: [...base.accounts, { id: 'acct-late', name: 'late', status: 'suspended', limits: {} }],
      apiKeys: [
        ...base.apiKeys,
        bundleKey('k-leaked', revoked.sha256, { status: 'revoked' }),
        bundleKey('k-expired', expired.sha256, { expiresAt: new Date(Date.now() - 60_000).toISOString() }),
        bundleKey('k-suspended', suspended.sha256, { accountId: 'acct-late' }),
      ],
      prices: [{ model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 10, requestMicros: 0 }],
    }),
  });
  const chat = async (secret: string): Promise<{ status: number; record: RequestRecord | undefined }> => {
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
      body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }),
    });
    await res.text();
    // The record is durable before the answer's last byte.
    return { status: res.status, record: spool.records.find((r) => r.requestId === res.headers.get('x-request-id')) };
  };

  const refusals: Array<[string, string, number, string, string]> = [
    [revoked.secret, 'ZN_ERR_API_KEY_REVOKED', 401, 'k-leaked', 'acct-1'],
    [expired.secret, 'ZN_ERR_API_KEY_EXPIRED', 401, 'k-expired', 'acct-1'],
    [suspended.secret, 'ZN_ERR_ACCOUNT_SUSPENDED', 403, 'k-suspended', 'acct-late'],
  ];
  for (const [secret, code, status, keyId, accountId] of refusals) {
    const got = await chat(secret);
    t.match(got, { status, record: { keyId, accountId, status: 'rejected', errorCode: code, bodies: null, attempts: [] } }, code);
    t.same(got.record?.cost, { reservedMicros: 0, costMicros: 0, leaseId: null, priced: false }, `${code}: nothing reserved or charged`);
    t.same(got.record?.usage, { inputTokens: 0, outputTokens: 0, estimated: false }, `${code}: no usage`);
  }
  t.match(await chat(unknown.secret), { status: 401, record: { keyId: null, accountId: null, errorCode: 'ZN_ERR_API_KEY_INVALID' } }, 'a key the node does not know names none');
  t.equal(upstream.requests.length, 0, 'nothing was forwarded');

  // At 90 % of the quota they are refusals without a valid key like any other: not written, counted.
  state.fullness = 0.9;
  const before = spool.records.length;
  for (const [secret, code, status] of refusals) t.match(await chat(secret), { status, record: undefined }, `${code}: not recorded at 90 %`);
  t.equal(spool.records.length, before, 'not one record written');
  t.match(await chat(node.secret), { status: 200, record: { keyId: 'key-a', accountId: 'acct-1', status: 'ok' } }, 'a valid key is served and recorded');
});

/** Bytes of caller text per anonymous request: under the 4 MiB body limit, past the record's 1 MiB bound. */
const JUNK = 'x'.repeat(3 * 1024 * 1024);

t.test('over HTTP: callers without a key can neither fill a real spool nor get a keyed caller refused ZN_ERR_SPOOL_FULL', async (t) => {
  const upstream = await startFakeUpstream(t);
  const file = path.join(tempStateDir(t), 'spool.db');
  const limits: SpoolLimits = { quotaBytes: 4 * 1024 * 1024, fullPolicy: 'reject' };
  const spool = new SpoolStore({ file, meta: createSpoolFile(file, 'node-1'), logger: quietLogger(), limits: () => limits });
  t.teardown(() => spool.close());
  const metrics = createNodePipelineMetrics(() => ({ spoolBytes: spool.bytes(), backfillBacklog: spool.backlogCount() }));
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    services: { spool, metrics },
    bundle: (_base, hash) => ({
      apiKeys: [bundleKey('key-a', hash, { guardrailPolicyId: 'p' })],
      guardrailPolicies: [policy('p', [{ detector: 'secret', action: 'block', on: 'input' }])],
    }),
  });
  const chat = async (content: string, secret?: string): Promise<{ status: number; code: string | undefined }> => {
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(secret !== undefined ? { authorization: `Bearer ${secret}` } : {}) },
      body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content }] }),
    });
    const body = (await res.json()) as { error?: { code?: string } };
    return { status: res.status, code: body.error?.code };
  };
  const stored = (): Array<{ keyId: string | null; errorCode: string | null; bodies: unknown }> => {
    const db = new Database(file, { readonly: true });
    try {
      const rows = db.prepare('select record_json as json from records order by sequence').all() as Array<{ json: string }>;
      return rows.map((r) => JSON.parse(r.json) as RequestRecord);
    } finally {
      db.close();
    }
  };

  for (let i = 0; i < 12; i++) t.same(await chat(JUNK), { status: 401, code: 'ZN_ERR_API_KEY_MISSING' });
  const anonymous = stored();
  t.equal(anonymous.length, 12, 'refusals without a key are recorded while there is room');
  t.ok(anonymous.every((r) => r.keyId === null && r.bodies === null), 'without the caller text');
  t.ok(spool.bytes() < limits.quotaBytes / 2, `the spool holds ${spool.bytes()} bytes, far from its ${limits.quotaBytes} quota`);
  t.same(await chat('hi', node.secret), { status: 200, code: undefined }, 'a keyed caller is served');

  t.same(await chat('my key is sk-proj-Abc123Def456Ghi789Jkl0', node.secret), { status: 400, code: 'ZN_ERR_GUARDRAIL_BLOCKED' });
  t.match(stored().at(-1), { errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED', bodies: { request: /my key is/ } }, 'the blocked body is kept, masked');
  t.notMatch(JSON.stringify(stored().at(-1)), /sk-proj-Abc123/, 'never the matched text');

  // Nearly full: refusals without a key are no longer written, keyed callers still get in.
  limits.quotaBytes = Math.ceil(spool.bytes() / 0.95);
  const before = stored().length;
  for (let i = 0; i < 5; i++) t.same(await chat(JUNK), { status: 401, code: 'ZN_ERR_API_KEY_MISSING' });
  t.equal(stored().length, before, 'not one record written');
  t.equal(sampleValue(parsePrometheusText(metrics.render()), 'zenova_node_spool_dropped_records_total', { reason: 'ZN_ERR_API_KEY_MISSING' }), 5);
  t.equal(node.logs().filter((l) => typeof l.msg === 'string' && l.msg.includes('records of requests refused without a valid key are not written')).length, 1, 'one warning');
  t.same(await chat('hi', node.secret), { status: 200, code: undefined }, 'a keyed caller is still served');

  // Full: a keyed caller refused (policy reject) is recorded, without bodies, also for a guardrail block.
  limits.quotaBytes = 1;
  t.same(await chat('hi', node.secret), { status: 503, code: 'ZN_ERR_SPOOL_FULL' });
  t.same(await chat('my key is sk-proj-Abc123Def456Ghi789Jkl0', node.secret), { status: 400, code: 'ZN_ERR_GUARDRAIL_BLOCKED' });
  t.match(
    stored().slice(-2).map((r) => [r.keyId, r.errorCode, r.bodies]),
    [['key-a', 'ZN_ERR_SPOOL_FULL', null], ['key-a', 'ZN_ERR_GUARDRAIL_BLOCKED', null]],
  );
});

const PII = 'mail jane.doe@example.com card 4111 1111 1111 1111 key sk-proj-Abc123Def456Ghi789Jkl0';
const MASKS = [
  { detector: 'email', action: 'mask', on: 'both' },
  { detector: 'bank-card', action: 'mask', on: 'both' },
  { detector: 'secret', action: 'mask', on: 'both' },
] as const;

/** A node whose key-a has policy `p` of `rules`, recording into a spool double that keeps bodies; Anthropic alias `claude` and tool server `tools` are configured (never reached). */
async function guardedNode(t: Test, rules: Parameters<typeof policy>[1]) {
  const upstream = await startFakeUpstream(t);
  const spool = fakeSpool({ fullness: 0, keepsBodies: true });
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    services: { spool },
    bundle: (base, hash) => ({
      node: { ...base.node, surfaces: ['model', 'tools'] },
      upstreams: [...base.upstreams, { id: 'up-2', name: 'claude', kind: 'anthropic', baseUrl: upstream.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 10_000 }],
      routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 10_000, retries: 0 }],
      apiKeys: [bundleKey('key-a', hash, { guardrailPolicyId: 'p' })],
      guardrailPolicies: [policy('p', rules)],
      toolServers: [{ name: 'tools', url: 'http://127.0.0.1:9/mcp', apiKey: 'tool-server-key-0123456789', timeoutMs: 10_000, callMicros: 0 }],
    }),
  });
  /** POSTs `body` to `path` and returns the answer's code and the request's record. */
  const post = async (path: string, body: unknown): Promise<{ status: number; code: string | undefined; record: RequestRecord | undefined }> => {
    const before = spool.records.length;
    const res = await fetch(`${node.origin}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${node.secret}` },
      body: JSON.stringify(body),
    });
    const answer = (await res.json()) as { error?: { code?: string; type?: string } };
    // The record is durable before the answer's last byte.
    return { status: res.status, code: answer.error?.code ?? answer.error?.type, record: spool.records.length === before + 1 ? spool.records[before] : undefined };
  };
  return { post };
}

/** `value` under `depth` levels of objects. */
function nested(depth: number, value: unknown = 's'): unknown {
  let out = value;
  for (let i = 0; i < depth; i++) out = { a: out };
  return out;
}

t.test("a keyed request refused before its input rules ran over all of it keeps no body: the text they did not reach, or could not mask, is the caller's", async (t) => {
  const rowsOf = { rows: Array.from({ length: 50_001 }, (_, i) => `r${i}`) };
  const unmasked = (record: RequestRecord | undefined): boolean => /jane\.doe@example\.com|4111 1111 1111 1111|sk-proj-Abc123/.test(JSON.stringify(record));

  await t.test('text past what guardrails check (64 levels deep, 50 000 strings)', async (t) => {
    const { post } = await guardedNode(t, [...MASKS, { detector: 'phone', action: 'block', on: 'input' }]);
    const blocked = await post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: `${PII} phone +1 415 555 0132` }] });
    t.match(blocked, { status: 400, record: { errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED', bodies: { request: /mail/ } } }, 'a request a rule blocked keeps its body');
    t.notOk(unmasked(blocked.record), 'masked');
    const refused = {
      'a content part nested 64 deep': await post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: [{ type: 'text', text: PII }, { type: 'x-note', data: nested(64) }] }] }),
      'tool-call arguments of 50 001 strings': await post('/v1/chat/completions', {
        model: 'echo',
        messages: [
          { role: 'user', content: PII },
          { role: 'assistant', content: null, tool_calls: [{ id: 't1', type: 'function', function: { name: 'export_rows', arguments: JSON.stringify(rowsOf) } }] },
          { role: 'tool', tool_call_id: 't1', content: 'done' },
        ],
      }),
      'an Anthropic tool_use input of 50 001 strings': await post('/v1/messages', {
        model: 'claude',
        max_tokens: 50,
        messages: [
          { role: 'user', content: PII },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'tu1', name: 'export_rows', input: rowsOf }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'tu1', content: 'done' }] },
        ],
      }),
      'MCP arguments nested 70 deep': await post('/mcp/tools', { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'crm_lookup', arguments: { note: PII, tree: nested(70) } } }),
    };
    for (const [what, got] of Object.entries(refused)) {
      t.match(got, { status: 400, record: { errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED', bodies: null } }, `${what}: refused, its record without bodies`);
      t.notOk(unmasked(got.record), `${what}: the text the policy masks is not in the record`);
    }
  });

  await t.test('an output rule the node cannot apply, on a stream or an MCP call (refused up front)', async (t) => {
    const { post } = await guardedNode(t, [...MASKS, { detector: 'regex', pattern: '(?i)', action: 'mask', on: 'output' }]);
    const refused = {
      stream: await post('/v1/chat/completions', { model: 'echo', stream: true, messages: [{ role: 'user', content: PII }] }),
      'MCP call': await post('/mcp/tools', { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'crm_lookup', arguments: { note: PII } } }),
    };
    for (const [what, got] of Object.entries(refused)) {
      t.match(got, { status: 400, record: { errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED', bodies: null } }, `${what}: refused, its record without bodies`);
      t.notOk(unmasked(got.record), `${what}: the text the policy masks is not in the record`);
    }
  });

  await t.test('an input rule the node cannot apply: every request of the key', async (t) => {
    const { post } = await guardedNode(t, [...MASKS, { detector: 'regex', pattern: '(?i)', action: 'mask', on: 'input' }]);
    const got = await post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: PII }] });
    t.match(got, { status: 400, record: { errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED', bodies: null } }, 'refused, its record without bodies');
    t.notOk(unmasked(got.record), 'the text the policy masks is not in the record');
  });
});
