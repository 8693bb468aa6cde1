/**
 * A node stopped normally (SIGTERM) hands its unspent lease credit back, with real processes: the
 * control plane closes the lease and frees the credit while the node stays stopped. A control plane
 * that does not answer holds the stop up only for the node's short bound; the return it missed
 * reaches it (or the next control plane on its database) on the node's next connect.
 */
import { join } from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { RETURN_CONFIRM_WAIT_MS } from '../../edge-node/src/billing/credit-channel.js';
import { testDatabase } from '../fixtures/postgres.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { balanceOf, debitedRequests, mustApi, pricedCall } from './billing-stack.js';
import type { ControlPlane } from './stack.js';
import { configureDemo, enrollNewNode, freePort, httpsMaterial, startControlPlane, startNodeServe, tempDir } from './stack.js';

const LEASE_CAP = 400_000;
const NODE = 'returning-edge';
const ACCOUNT = 'returner';

interface LeaseView {
  leaseId: string;
  account: string;
  state: 'open' | 'returned';
  grantedMicros: number;
  spentMicros: number;
  returnedMicros: number;
  outstandingMicros: number;
  reportedAt: string | null;
}

async function leasesOfNode(cp: ControlPlane): Promise<LeaseView[]> {
  const res = await cp.api<{ leases: LeaseView[] }>('GET', `/api/v1/leases?node=${NODE}`);
  if (res.status !== 200) throw new Error(`leases: ${res.status}`);
  return res.body.leases;
}

/** Serves priced calls until they are all debited, so the node's spend is the lease's settled spend. */
async function spendSome(t: Test, cp: ControlPlane, nodeUrl: string, apiKey: string, debitedBefore: number): Promise<number> {
  await waitFor(async () => (await pricedCall(nodeUrl, apiKey, 50)).status === 200, { what: 'a served priced call', timeoutMs: 30_000 });
  for (let i = 0; i < 3; i++) t.equal((await pricedCall(nodeUrl, apiKey, 50)).status, 200);
  const debited = debitedBefore + 4;
  await waitFor(async () => (await debitedRequests(cp, ACCOUNT)) === debited, { what: 'the calls to be debited', timeoutMs: 30_000 });
  return debited;
}

t.test('graceful stops and lease returns', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-lease-return-');
  const https = await httpsMaterial(join(work, 'https'));
  const env = { ZENOVA_LEASE_SHARE: '0.5', ZENOVA_LEASE_CAP_MICROS: String(LEASE_CAP), ZENOVA_LEASE_REFRESH_MS: '200' };
  const gatewayPort = await freePort();
  const cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw'), gatewayPort, env });
  const upstream = await startFakeUpstream(t);
  const { apiKey } = await configureDemo(cp, upstream.url, ACCOUNT);
  await mustApi(cp, 'PUT', '/api/v1/prices/echo', { inputMicrosPerToken: 3, outputMicrosPerToken: 7, requestMicros: 1000 }, 200);
  await mustApi(cp, 'POST', `/api/v1/accounts/${ACCOUNT}/credits`, { amountMicros: 1_000_000_000 }, 201);
  const stateDir = join(work, 'state');
  await enrollNewNode(t, cp, NODE, stateDir);
  const nodeEnv = { ZENOVA_LEASE_REPORT_MS: '200' };
  let debited = 0;

  await t.test('a node stopped with SIGTERM while connected closes its lease on the control plane and frees the unspent credit, without starting again', async (t) => {
    const node = await startNodeServe(t, { stateDir, env: nodeEnv });
    debited = await spendSome(t, cp, node.url, apiKey, debited);
    const [open] = await leasesOfNode(cp);
    t.equal(open?.state, 'open');
    t.ok((await balanceOf(cp, ACCOUNT)).outstandingLeasesMicros > 0, 'the lease holds credit while the node serves');

    t.equal(await node.proc.stop('SIGTERM', 20_000), 0, 'the node stops cleanly');
    // The node is gone for good: only the return it sent while stopping can close the lease.
    const closed = await waitFor(async () => {
      const lease = (await leasesOfNode(cp)).find((l) => l.leaseId === open!.leaseId);
      return lease?.state === 'returned' ? lease : undefined;
    }, { what: 'the control plane to close the stopped node\'s lease', timeoutMs: 10_000 });
    t.equal(closed.returnedMicros, closed.grantedMicros - closed.spentMicros, 'everything not spent is returned');
    t.ok(closed.returnedMicros > 0);
    t.equal(closed.outstandingMicros, 0);
    t.equal((await balanceOf(cp, ACCOUNT)).outstandingLeasesMicros, 0, 'the account has no credit outstanding any more');
    t.match(node.proc.output(), /"msg":"the control plane confirmed the lease returns"/, 'the node waited for the confirmation');
  });

  await t.test('a node stopping while the control plane does not answer stops within its bound, and the return reaches the control plane on its next connect', async (t) => {
    const node = await startNodeServe(t, { stateDir, env: nodeEnv });
    debited = await spendSome(t, cp, node.url, apiKey, debited);
    const open = (await leasesOfNode(cp)).find((l) => l.state === 'open');
    t.ok(open, 'the node holds a new lease');

    // Frozen, the control plane keeps the connection but reads nothing and answers nothing.
    const cpPid = cp.proc.child.pid!;
    process.kill(cpPid, 'SIGSTOP');
    let frozen = true;
    t.teardown(() => {
      if (frozen) process.kill(cpPid, 'SIGCONT');
    });
    const started = Date.now();
    const code = await node.proc.stop('SIGTERM', 30_000);
    const tookMs = Date.now() - started;
    t.equal(code, 0, 'the node stops cleanly');
    t.ok(tookMs < RETURN_CONFIRM_WAIT_MS + 5_000, `the stop took ${tookMs} ms, bounded by the wait for confirmations (${RETURN_CONFIRM_WAIT_MS} ms)`);
    t.match(node.proc.output(), /"msg":"the control plane did not confirm every lease return before the node stopped; they are sent again on the next connect"/);

    // It never read the return: killed, and another one started on the same database and port.
    await cp.proc.kill9();
    frozen = false;
    const back = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw'), gatewayPort, env });
    t.equal((await leasesOfNode(back)).find((l) => l.leaseId === open!.leaseId)?.state, 'open', 'the lease is still open on the control plane');

    const again = await startNodeServe(t, { stateDir, env: nodeEnv });
    const closed = await waitFor(async () => {
      const lease = (await leasesOfNode(back)).find((l) => l.leaseId === open!.leaseId);
      return lease?.state === 'returned' ? lease : undefined;
    }, { what: 'the lease to be closed once the node connected again', timeoutMs: 20_000 });
    t.equal(closed.returnedMicros, closed.grantedMicros - closed.spentMicros, 'everything not spent is returned');
    // The node's next lease, once it holds it, goes back at its next stop like any other.
    await waitFor(async () => (await leasesOfNode(back)).some((l) => l.state === 'open' && l.reportedAt !== null), { what: 'the node to hold and report its next lease', timeoutMs: 20_000 });
    t.equal(await again.proc.stop('SIGTERM', 20_000), 0);
    await waitFor(async () => (await leasesOfNode(back)).every((l) => l.state === 'returned'), { what: 'every lease of the node to be closed', timeoutMs: 10_000 });
    t.equal((await balanceOf(back, ACCOUNT)).outstandingLeasesMicros, 0, 'the account has no credit outstanding any more');
  });
});
