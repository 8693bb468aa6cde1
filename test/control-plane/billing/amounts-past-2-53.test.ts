// The billing API writes every amount exactly, also sums past 2^53 (Number.MAX_SAFE_INTEGER), on real
// PostgreSQL: an account's spend and a lease's cumulative grant and spend grow without bound (a
// balance is topped up again and again), and a double rounds 2^53 + 1 to 2^53.
import t from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { creditAccount } from '../../../control-plane/src/billing/account-credits.js';
import { topUpLease } from '../../../control-plane/src/billing/credit-leases.js';
import type { LeasePolicy } from '../../../control-plane/src/billing/lease-policy.js';
import { settleIngestedRecords } from '../../../control-plane/src/billing/settlement.js';
import { migrate } from '../../../control-plane/src/db/migrate.js';
import { withTransaction } from '../../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { configApp } from '../config-harness.js';
import { insertAccount, insertNode } from './billing-fixtures.js';

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER); // 2^53 − 1
const PAST_SAFE = MAX_SAFE + 2n; // 2^53 + 1: no double holds it
// The whole free balance in one lease, whatever its size.
const POLICY: LeasePolicy = { capMicros: 2n ** 62n, sharePpm: 1_000_000n, ttlMs: 3_600_000, refreshMs: 3_600_000 };

function record(requestId: string, nodeId: string, accountId: string, leaseId: string, costMicros: number, finishedAt: number): RequestRecord {
  return {
    schemaVersion: 1, requestId, nodeId, configVersion: 1, receivedAt: finishedAt - 1, finishedAt, surface: 'model',
    api: 'chat.completions', keyId: 'key-big', accountId, model: 'm', upstream: 'u', upstreamModel: 'm', stream: false, status: 'ok',
    httpStatus: 200, errorCode: null, usage: { inputTokens: 1, outputTokens: 1, estimated: false },
    cost: { reservedMicros: costMicros, costMicros, leaseId, priced: true },
    timings: { totalMs: 1, upstreamFirstByteMs: null, upstreamMs: null, stagesUs: {} }, attempts: [], guardrails: [], bodies: null,
  };
}

/** The integer the answer's text writes for `field` (the first one), digit for digit. */
function written(body: string, field: string): string | undefined {
  return new RegExp(`"${field}":(-?\\d+)[,}]`).exec(body)?.[1];
}

t.test('balances, spend and leases past 2^53 micro-units are answered exactly, as JSON integers', async (t) => {
  const db = await testDatabase(t);
  const { pool, call } = await configApp(t, db.url);
  await migrate(pool);
  const accountId = await insertAccount(pool, 'big-spender');
  const nodeId = await insertNode(pool, 'edge-big');
  const finishedAt = Date.now() - 60_000;

  // The most a balance may hold, leased and spent in full; then 2 more, leased and spent.
  await creditAccount(pool, accountId, MAX_SAFE, 'first');
  const first = await withTransaction(pool, (c) => topUpLease(c, nodeId, accountId, POLICY, Date.now()));
  const leaseId = first.lease!.id;
  t.equal(first.lease!.granted, MAX_SAFE);
  await withTransaction(pool, (c) => settleIngestedRecords(c, nodeId, [record('big-1', nodeId, accountId, leaseId, Number.MAX_SAFE_INTEGER, finishedAt)]));
  await creditAccount(pool, accountId, 2n, 'second');
  const second = await withTransaction(pool, (c) => topUpLease(c, nodeId, accountId, POLICY, Date.now()));
  t.equal(second.lease!.id, leaseId, 'the same lease, topped up');
  t.equal(second.lease!.granted, PAST_SAFE, 'its cumulative grant is past 2^53');
  await withTransaction(pool, (c) => settleIngestedRecords(c, nodeId, [record('big-2', nodeId, accountId, leaseId, 2, finishedAt)]));

  const balance = await call('GET', '/api/v1/accounts/big-spender/balance');
  t.equal(balance.statusCode, 200);
  t.equal(written(balance.body, 'spentMicros'), PAST_SAFE.toString(), "the account's spend, exact");
  t.equal(written(balance.body, 'balanceMicros'), '0');
  t.equal(written(balance.body, 'availableMicros'), '0');
  t.equal(written(balance.body, 'grantedMicros'), PAST_SAFE.toString(), "the lease's grant, exact");
  const lease = balance.body.slice(balance.body.indexOf('"leases"'));
  t.equal(written(lease, 'spentMicros'), PAST_SAFE.toString(), "the lease's spend, exact");
  t.equal(written(lease, 'outstandingMicros'), '0');

  const leases = await call('GET', '/api/v1/leases?node=edge-big');
  t.equal(leases.statusCode, 200);
  t.equal(written(leases.body, 'grantedMicros'), PAST_SAFE.toString());
  t.equal(written(leases.body, 'spentMicros'), PAST_SAFE.toString());

  for (const by of ['account', 'key', 'node']) {
    const spend = await call('GET', `/api/v1/spend?by=${by}&from=${finishedAt - 1}&to=${finishedAt + 1}`);
    t.equal(spend.statusCode, 200);
    t.equal(written(spend.body, 'spentMicros'), PAST_SAFE.toString(), `spend by ${by}, exact`);
    t.equal(written(spend.body, 'requests'), '2');
  }

  // Amounts stay JSON numbers (not strings): a small one reads back as the same number.
  await creditAccount(pool, accountId, 5n, null);
  const small = await call('GET', '/api/v1/accounts/big-spender/balance');
  t.match(small.json(), { balance: { balanceMicros: 5, availableMicros: 5 } });
});
