/**
 * Billing end to end with real processes: an account with balance B and a priced model, N callers
 * at once through a real node. The node refuses what its lease cannot cover (402, nothing
 * forwarded), and once the records are backfilled the balance is B minus exactly the costs of the
 * completed requests.
 */
import { join } from 'node:path';
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { balanceOf, costOf, debitedRequests, mustApi, pricedCall } from './billing-stack.js';
import type { Price } from './billing-stack.js';
import { configureDemo, enrollNewNode, httpsMaterial, startControlPlane, startNodeServe, tempDir } from './stack.js';

const PRICE: Price = { inputMicrosPerToken: 3, outputMicrosPerToken: 7, requestMicros: 1_000 };
const BALANCE = 15_000;
const CALLERS = 24;
const MAX_TOKENS = 20;

t.test('N concurrent callers: no request is forwarded without a reservation, and the balance ends at B minus the costs, exactly', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-billing-');
  const https = await httpsMaterial(join(work, 'https'));
  const cp = await startControlPlane(t, {
    db, https, gatewayTlsDir: join(work, 'gw'),
    env: { ZENOVA_LEASE_SHARE: '1', ZENOVA_LEASE_CAP_MICROS: '1000000000', ZENOVA_LEASE_REFRESH_MS: '200' },
  });
  // Slow answers keep every caller's reservation held at once.
  const upstream = await startFakeUpstream(t, { latencyMs: 500 });
  const { apiKey } = await configureDemo(cp, upstream.url, 'payer');
  await mustApi(cp, 'PUT', '/api/v1/prices/echo', PRICE, 200);
  await mustApi(cp, 'POST', '/api/v1/accounts/payer/credits', { amountMicros: BALANCE, reference: 'e2e' }, 201);

  const stateDir = join(work, 'state');
  await enrollNewNode(t, cp, 'billing-edge', stateDir);
  const node = await startNodeServe(t, { stateDir, env: { ZENOVA_LEASE_REPORT_MS: '200' } });
  await node.proc.waitForLine(/"msg":"config applied"/, 30_000);
  // The node holds the lease once it reports it.
  await waitFor(async () => {
    const res = await cp.api<{ leases: Array<{ account: string; grantedMicros: number; reportedAt: string | null }> }>('GET', '/api/v1/leases?node=billing-edge');
    return res.body.leases.some((l) => l.account === 'payer' && l.grantedMicros === BALANCE && l.reportedAt !== null);
  }, { what: 'the node to hold the whole balance as its lease', timeoutMs: 20_000 });

  const calls = await Promise.all(Array.from({ length: CALLERS }, () => pricedCall(node.url, apiKey, MAX_TOKENS)));
  const ok = calls.filter((c) => c.status === 200);
  const refused = calls.filter((c) => c.status === 402);
  t.equal(ok.length + refused.length, CALLERS, `every call answered 200 or 402: ${JSON.stringify(calls.map((c) => c.status))}`);
  t.ok(ok.length > 0, `${ok.length} calls served`);
  t.ok(refused.length > 0, `${refused.length} calls refused: the lease cannot cover ${CALLERS} worst cases at once`);
  for (const c of refused) t.equal(c.code, 'ZN_ERR_CREDIT_EXHAUSTED');
  t.equal(upstream.requests.length, ok.length, 'the upstream saw only the requests that were reserved and served');

  const costs = ok.reduce((sum, c) => sum + costOf(c, PRICE), 0);
  await waitFor(async () => (await debitedRequests(cp, 'payer')) === ok.length, { what: `${ok.length} debits`, timeoutMs: 30_000 });
  const balance = await balanceOf(cp, 'payer');
  t.equal(balance.balanceMicros, BALANCE - costs, `balance = ${BALANCE} − ${costs}`);
  t.equal(balance.spentMicros, costs);

  // Every served request carried a reservation that covered its cost.
  for (const c of ok) {
    const rec = await cp.api<{ request?: { cost?: { reservedMicros: number; costMicros: number } }; cost?: { reservedMicros: number; costMicros: number } }>('GET', `/api/v1/requests/${c.requestId}`);
    t.equal(rec.status, 200, `record of ${c.requestId}`);
    const cost = rec.body.request?.cost ?? rec.body.cost;
    t.ok(cost !== undefined && cost.reservedMicros >= cost.costMicros && cost.costMicros === costOf(c, PRICE), `record of ${c.requestId} reserved ≥ charged`);
  }
});
