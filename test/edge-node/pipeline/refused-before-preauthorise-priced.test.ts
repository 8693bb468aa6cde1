// A request refused before stage preauthorise (a rate limit, a guardrail, a body billed above the
// price, a model the key may not use) never had its price looked up there; its record must still
// say whether its model has a price (`cost.priced`), since the console reads `false` as "the model
// had no price". Nothing is reserved or charged for it either way. Real app, real limiter (memory
// store), real lease credit, real spool file in a temp dir, fake upstream.
import path from 'node:path';
import Database from 'better-sqlite3';
import { pino } from 'pino';
import t from 'tap';
import type { Test } from 'tap';
import type { ConfigBundle, RequestRecord } from '../../../proto/src/index.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { ACCOUNT_ID, bundleKey, newCallerKey } from '../config-fixtures.js';
import { policy } from '../guardrails/guardrail-fixtures.js';
import { quietLogger, tempStateDir } from '../spool/spool-helpers.js';
import { startPipelineNode } from './pipeline-harness.js';

const ECHO_PRICE = { model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 10, requestMicros: 0 };
const SECRET_TEXT = 'my key is sk-proj-Abc123Def456Ghi789Jkl0';
const NOTHING_HELD = { reservedMicros: 0, costMicros: 0, leaseId: null };

interface Caller {
  /** POSTs a chat body with `secret` (none: no key) and returns the answer's status, code and the record the spool committed for it. */
  chat(body: unknown, secret?: string): Promise<{ status: number; code: string | undefined; record: RequestRecord | undefined }>;
  /** The key of `key-a`: one request per minute, every model. */
  limited: string;
  /** A key whose guardrail policy blocks secrets on input. */
  guarded: string;
  /** A key that may use `echo-2` only. */
  echo2Only: string;
}

/** A node whose `echo` alias is priced (or not), with a funded lease for ACCOUNT_ID and a real spool. */
async function startNode(t: Test, prices: ConfigBundle['prices']): Promise<Caller> {
  const upstream = await startFakeUpstream(t);
  const file = path.join(tempStateDir(t), 'spool.db');
  const spool = new SpoolStore({ file, meta: createSpoolFile(file, 'node-1'), logger: quietLogger(), limits: () => ({ quotaBytes: 64 * 1024 * 1024, fullPolicy: 'reject' }) });
  t.teardown(() => spool.close());
  const limiter = new NodeRateLimiter(new MemoryLimitStore(), pino({ level: 'silent' }));
  t.teardown(() => limiter.close());
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 1_000_000_000, expiresAt: Date.now() + 600_000 });
  const [guarded, echo2Only] = [newCallerKey(), newCallerKey()];
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    services: { limiter, spool, credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' })) },
    bundle: (base) => ({
      apiKeys: [
        ...base.apiKeys.map((k) => ({ ...k, limits: { requestsPerMinute: 1 } })),
        bundleKey('key-guarded', guarded.sha256, { guardrailPolicyId: 'p' }),
        bundleKey('key-echo-2', echo2Only.sha256, { allowedModels: ['echo-2'] }),
      ],
      guardrailPolicies: [policy('p', [{ detector: 'secret', action: 'block', on: 'input' }])],
      prices,
    }),
  });
  const recordOf = (requestId: string | null): RequestRecord | undefined => {
    const db = new Database(file, { readonly: true });
    try {
      const row = db.prepare('select record_json as json from records where request_id = ?').get(requestId) as { json: string } | undefined;
      return row === undefined ? undefined : (JSON.parse(row.json) as RequestRecord);
    } finally {
      db.close();
    }
  };
  return {
    limited: node.secret,
    guarded: guarded.secret,
    echo2Only: echo2Only.secret,
    async chat(body, secret) {
      const res = await fetch(`${node.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(secret !== undefined ? { authorization: `Bearer ${secret}` } : {}) },
        body: JSON.stringify(body),
      });
      const answer = (await res.json()) as { error?: { code?: string } };
      // The record is committed before the answer's last byte.
      return { status: res.status, code: answer.error?.code, record: recordOf(res.headers.get('x-request-id')) };
    },
  };
}

const hello = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({ model: 'echo', messages: [{ role: 'user', content: 'Say hello.' }], ...extra });

t.test('a request refused before preauthorise for a priced model is recorded priced, with nothing reserved or charged', async (t) => {
  const node = await startNode(t, [ECHO_PRICE]);
  const served = await node.chat(hello(), node.limited);
  t.match(served, { status: 200, record: { status: 'ok', cost: { leaseId: 'lease-1', priced: true } } }, 'served: priced by preauthorise');

  const refusals: Array<[string, Awaited<ReturnType<Caller['chat']>>]> = [
    ['rate limit', await node.chat(hello(), node.limited)],
    ['body billed above the price (audio)', await node.chat(hello({ audio: { voice: 'alloy', format: 'wav' } }), node.guarded)],
    ['input guardrail', await node.chat({ model: 'echo', messages: [{ role: 'user', content: SECRET_TEXT }] }, node.guarded)],
    ['model the key may not use', await node.chat(hello(), node.echo2Only)],
  ];
  const codes = refusals.map(([, got]) => got.code);
  t.same(codes, ['ZN_ERR_RATE_LIMITED', 'ZN_ERR_INVALID_REQUEST', 'ZN_ERR_GUARDRAIL_BLOCKED', 'ZN_ERR_MODEL_NOT_ALLOWED'], 'each refused by the stage meant');
  for (const [why, got] of refusals) {
    t.match(got.record, { status: 'rejected', model: 'echo', attempts: [] }, `${why}: recorded as refused`);
    t.notOk(Object.hasOwn(got.record?.timings.stagesUs ?? {}, 'preauthorise'), `${why}: refused before preauthorise`);
    t.same(got.record?.cost, { ...NOTHING_HELD, priced: true }, `${why}: priced, nothing reserved or charged`);
  }
});

t.test('a request refused before its model or a valid key is known is recorded unpriced, even for a priced model', async (t) => {
  const node = await startNode(t, [ECHO_PRICE]);
  const noModel = await node.chat({ messages: [{ role: 'user', content: 'Say hello.' }] }, node.limited);
  t.match(noModel, { status: 400, code: 'ZN_ERR_INVALID_REQUEST', record: { model: null } }, 'the schema refused it: no model');
  t.same(noModel.record?.cost, { ...NOTHING_HELD, priced: false }, 'no model: unpriced');
  const noKey = await node.chat(hello());
  t.match(noKey, { status: 401, code: 'ZN_ERR_API_KEY_MISSING', record: { model: 'echo', keyId: null } }, 'no key: refused by authenticate, recorded');
  t.same(noKey.record?.cost, { ...NOTHING_HELD, priced: false }, 'no key: no account to price it for');
});

t.test('a request refused before preauthorise for a model without a price is recorded unpriced', async (t) => {
  const node = await startNode(t, []);
  const served = await node.chat(hello(), node.limited);
  t.match(served, { status: 200, record: { status: 'ok', cost: { ...NOTHING_HELD, priced: false } } }, 'served: unpriced');
  const refusals: Array<[string, Awaited<ReturnType<Caller['chat']>>]> = [
    ['rate limit', await node.chat(hello(), node.limited)],
    ['input guardrail', await node.chat({ model: 'echo', messages: [{ role: 'user', content: SECRET_TEXT }] }, node.guarded)],
    ['model the key may not use', await node.chat(hello(), node.echo2Only)],
  ];
  t.same(refusals.map(([, got]) => got.code), ['ZN_ERR_RATE_LIMITED', 'ZN_ERR_GUARDRAIL_BLOCKED', 'ZN_ERR_MODEL_NOT_ALLOWED'], 'each refused by the stage meant');
  for (const [why, got] of refusals) t.same(got.record?.cost, { ...NOTHING_HELD, priced: false }, `${why}: unpriced`);
  // Audio is billed above a price only: an unpriced request passes it (node-api.md).
  t.match(await node.chat(hello({ audio: { voice: 'alloy', format: 'wav' } }), node.guarded), { status: 200, record: { cost: { priced: false } } }, 'unpriced audio is served, unpriced');
});
