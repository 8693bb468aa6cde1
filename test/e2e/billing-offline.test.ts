/**
 * Billing with the control plane down, with real processes: the node serves from its credit lease
 * until the lease runs out, then refuses with ZN_ERR_CREDIT_EXHAUSTED (402) without forwarding;
 * after the control plane is back, the backfilled records are debited exactly once and the node
 * gets credit again.
 */
import { join } from 'node:path';
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { balanceOf, costOf, debitedRequests, mustApi, pricedCall } from './billing-stack.js';
import type { PricedCall, Price } from './billing-stack.js';
import { configureDemo, enrollNewNode, freePort, httpsMaterial, nodeView, startControlPlane, startNodeServe, tempDir } from './stack.js';

const PRICE: Price = { inputMicrosPerToken: 2, outputMicrosPerToken: 5, requestMicros: 1_000 };
const BALANCE = 1_000_000;
const LEASE_CAP = 6_000;

t.test('control plane down: the node serves until its lease is spent, then 402; after reconnection the ledger settles exactly once', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-billing-offline-');
  const https = await httpsMaterial(join(work, 'https'));
  const gatewayPort = await freePort();
  const env = { ZENOVA_LEASE_SHARE: '1', ZENOVA_LEASE_CAP_MICROS: String(LEASE_CAP), ZENOVA_LEASE_REFRESH_MS: '200' };
  const cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw'), gatewayPort, env });
  const upstream = await startFakeUpstream(t);
  const { apiKey } = await configureDemo(cp, upstream.url, 'roamer');
  await mustApi(cp, 'PUT', '/api/v1/prices/echo', PRICE, 200);
  await mustApi(cp, 'POST', '/api/v1/accounts/roamer/credits', { amountMicros: BALANCE }, 201);

  const stateDir = join(work, 'state');
  await enrollNewNode(t, cp, 'roaming-edge', stateDir);
  const node = await startNodeServe(t, { stateDir, env: { ZENOVA_LEASE_REPORT_MS: '200' } });
  await node.proc.waitForLine(/"msg":"config applied"/, 30_000);
  await waitFor(async () => {
    const res = await cp.api<{ leases: Array<{ account: string; grantedMicros: number; reportedAt: string | null }> }>('GET', '/api/v1/leases?node=roaming-edge');
    return res.body.leases.some((l) => l.account === 'roamer' && l.grantedMicros === LEASE_CAP && l.reportedAt !== null);
  }, { what: 'the node to hold its lease', timeoutMs: 20_000 });

  await cp.proc.kill9();

  const served: PricedCall[] = [];
  let refusal: PricedCall | undefined;
  for (let i = 0; i < 20 && refusal === undefined; i++) {
    const call = await pricedCall(node.url, apiKey, 50);
    if (call.status === 200) served.push(call);
    else refusal = call;
  }
  t.ok(served.length >= 2, `${served.length} calls served offline from the lease`);
  t.equal(refusal?.status, 402, 'then the lease is spent');
  t.equal(refusal?.code, 'ZN_ERR_CREDIT_EXHAUSTED');
  const offlineCost = served.reduce((s, c) => s + costOf(c, PRICE), 0);
  t.ok(offlineCost <= LEASE_CAP, `spent ${offlineCost} offline, within the lease of ${LEASE_CAP}`);
  t.equal(upstream.requests.length, served.length, 'the refused call was not forwarded');

  const back = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw'), gatewayPort, env });
  await waitFor(async () => (await debitedRequests(back, 'roamer').catch(() => 0)) >= served.length, { what: 'the offline requests to be debited', timeoutMs: 30_000 });
  await waitFor(async () => (await nodeView(back, 'roaming-edge').catch(() => undefined) as unknown as { backfillBacklog?: number } | undefined)?.backfillBacklog === 0, { what: 'the backlog to drain', timeoutMs: 30_000 });
  t.equal(await debitedRequests(back, 'roamer'), served.length, 'each served request debited once');
  t.equal((await balanceOf(back, 'roamer')).balanceMicros, BALANCE - offlineCost, 'balance = B − the offline costs, exactly');

  // Reconnected, the node reports its spend and is topped up: it serves again.
  const again = await waitFor(async () => {
    const call = await pricedCall(node.url, apiKey, 50);
    return call.status === 200 ? call : undefined;
  }, { what: 'the node to be topped up', timeoutMs: 20_000 });
  await waitFor(async () => (await debitedRequests(back, 'roamer')) === served.length + 1, { what: 'the new request debited', timeoutMs: 30_000 });
  t.equal((await balanceOf(back, 'roamer')).balanceMicros, BALANCE - offlineCost - costOf(again, PRICE));
});
