/**
 * A node the control plane cut off stops serving priced requests from its credit leases, with real
 * processes and PostgreSQL: a deleted node (NODE_DELETED, its leases' credit already given back to
 * the account) serves nothing at all any more — every request, unpriced ones too, 503
 * ZN_ERR_NODE_DELETED on every replica and after a restart, and `zenova-node status` says it was
 * deleted —, and the old host of a node re-enrolled elsewhere (its credentials revoked, the new
 * host leased the node's credit) answers priced requests 503 ZN_ERR_CREDIT_WITHDRAWN while still
 * serving unpriced ones: never requests whose records can never be delivered, so never charged.
 * Served and debited calls are counted.
 * A same-host re-enrollment while serving gives the credit back. A node whose credential expired
 * while it was offline is not cut off: it serves from its lease, and its re-enrollment on the same
 * host delivers those records.
 */
import { join } from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import pg from 'pg';
import { fetch } from 'undici';
import { testDatabase } from '../fixtures/postgres.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import type { StartedProcess } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { balanceOf, debitedRequests, mustApi, pricedCall } from './billing-stack.js';
import type { ControlPlane } from './stack.js';
import { configureDemo, countLines, enrollNewNode, freePort, httpsMaterial, runEnroll, startControlPlane, startNodeServe, tempDir, tokenOf } from './stack.js';

const PRICE = { inputMicrosPerToken: 3, outputMicrosPerToken: 7, requestMicros: 1000 };
const NODE_ENV = { ZENOVA_LEASE_REPORT_MS: '200' };
const REPLICA_ENV = { ...NODE_ENV, ZENOVA_NODE_REPLICAS: '2', ZENOVA_NODE_LINK_LOCK_INTERVAL_MS: '250' };
const WITHDRAWN_LINE = /"msg":"the control plane refused this node/;

/** A call to the unpriced alias `free` (no price: it costs nothing and reserves nothing): its status and error code. */
async function unpricedCall(nodeUrl: string, apiKey: string): Promise<{ status: number; code?: string }> {
  const res = await fetch(`${nodeUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'free', max_tokens: 20, messages: [{ role: 'user', content: 'free?' }] }),
  });
  const text = await res.text();
  if (res.status === 200) return { status: 200 };
  return { status: res.status, code: (JSON.parse(text) as { error?: { code?: string } }).error?.code };
}

/** `zenova-node status --state-dir D`'s text. */
async function nodeStatusText(t: Test, stateDir: string): Promise<string> {
  const { command, args } = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({ name: 'zenova-node status', command, args: [...args, 'status', '--state-dir', stateDir], t });
  await proc.exited;
  return proc.output();
}

/** Counts the priced calls a node answered 200, and checks the others were refused as withdrawn. */
class Tally {
  served = 0;
  constructor(private readonly apiKey: string) {}

  /** `n` priced calls that must be answered. */
  async serve(t: Test, nodeUrl: string, n: number): Promise<void> {
    for (let i = 0; i < n; i++) {
      const call = await pricedCall(nodeUrl, this.apiKey, 50);
      t.equal(call.status, 200, `priced call answered (${call.code ?? 'ok'})`);
      if (call.status === 200) this.served += 1;
    }
  }

  /** `n` priced calls that must be refused as withdrawn (or, `code`, otherwise); one answered is counted as served. */
  async refused(t: Test, nodeUrl: string, n: number, code = 'ZN_ERR_CREDIT_WITHDRAWN'): Promise<void> {
    for (let i = 0; i < n; i++) {
      const call = await pricedCall(nodeUrl, this.apiKey, 50);
      if (call.status === 200) this.served += 1;
      t.match(call, { status: 503, code }, `priced call refused (${code})`);
    }
  }

  /** Waits for the first priced call the node answers (credit granted), counting it. */
  async firstServed(nodeUrl: string, what: string): Promise<void> {
    await waitFor(async () => (await pricedCall(nodeUrl, this.apiKey, 50)).status === 200, { what, timeoutMs: 30_000 });
    this.served += 1;
  }
}

async function debitedAll(cp: ControlPlane, account: string, tally: Tally, what: string): Promise<void> {
  await waitFor(async () => (await debitedRequests(cp, account)) >= tally.served, { what, timeoutMs: 30_000 });
}

function anyLine(procs: StartedProcess[], re: RegExp): boolean {
  return procs.some((p) => countLines(p, re) > 0);
}

t.test('nodes the control plane cut off and priced requests', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-cut-off-');
  const https = await httpsMaterial(join(work, 'https'));
  const env = { ZENOVA_LEASE_SHARE: '0.5', ZENOVA_LEASE_CAP_MICROS: '400000', ZENOVA_LEASE_REFRESH_MS: '200' };
  const cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw'), gatewayPort: await freePort(), env });
  const upstream = await startFakeUpstream(t);
  await configureDemo(cp, upstream.url, 'bootstrap');
  await mustApi(cp, 'POST', '/api/v1/routes', { alias: 'free', targets: [{ upstream: 'fake', model: 'demo-echo' }] }, 201);
  await mustApi(cp, 'PUT', '/api/v1/prices/echo', PRICE, 200);

  const account = async (name: string): Promise<string> => {
    const { apiKey } = await configureDemo(cp, upstream.url, name);
    await mustApi(cp, 'POST', `/api/v1/accounts/${name}/credits`, { amountMicros: 1_000_000_000 }, 201);
    return apiKey;
  };

  await t.test('after its deletion, a node refuses every request, unpriced ones too, on every replica and after a restart, and the account is debited every priced call it answered', async (t) => {
    const apiKey = await account('deleted-acct');
    const tally = new Tally(apiKey);
    const stateDir = join(work, 'deleted');
    await enrollNewNode(t, cp, 'deleted-edge', stateDir);
    const replicas = [await startNodeServe(t, { stateDir, env: REPLICA_ENV }), await startNodeServe(t, { stateDir, env: REPLICA_ENV })];
    for (const r of replicas) {
      await tally.firstServed(r.url, 'a replica to serve a priced call');
      await tally.serve(t, r.url, 3);
    }
    await debitedAll(cp, 'deleted-acct', tally, 'the calls served before the deletion to be debited');
    t.ok((await balanceOf(cp, 'deleted-acct')).outstandingLeasesMicros > 0, 'the node holds a lease');

    t.equal((await cp.api('DELETE', '/api/v1/nodes/deleted-edge')).status, 200);
    const procs = replicas.map((r) => r.proc);
    await waitFor(() => anyLine(procs, /"code":"NODE_DELETED".*"msg":"control session ended"/), { what: 'the link holder to be refused NODE_DELETED', timeoutMs: 30_000 });

    for (const r of replicas) {
      // The replica without the control link learns of the deletion at its next lease report (200 ms here).
      await waitFor(async () => (await unpricedCall(r.url, apiKey)).code === 'ZN_ERR_NODE_DELETED', { what: 'a replica to refuse an unpriced call as deleted', timeoutMs: 30_000 });
      t.same(await unpricedCall(r.url, apiKey), { status: 503, code: 'ZN_ERR_NODE_DELETED' }, 'an unpriced call is refused: the node was deleted');
      await tally.refused(t, r.url, 3, 'ZN_ERR_NODE_DELETED');
    }
    const withdrawnLines = procs.reduce((n, p) => n + countLines(p, WITHDRAWN_LINE), 0);
    t.equal(withdrawnLines, 1, 'the withdrawal is logged once, by the link holder');
    t.ok(anyLine(procs, /"level":50.*"code":"NODE_DELETED".*"closedLeaseIds":\["[^\]]+\].*its credit is withdrawn and its leases closed; every caller request is refused with ZN_ERR_NODE_DELETED/), 'at error level, naming the closed lease');

    // Restarted (both replicas gone), the node refuses from its first request, before any control session.
    await Promise.all(replicas.map((r) => r.proc.stop()));
    const restarted = await startNodeServe(t, { stateDir, env: NODE_ENV });
    t.same(await unpricedCall(restarted.url, apiKey), { status: 503, code: 'ZN_ERR_NODE_DELETED' }, 'after a restart an unpriced call is refused as deleted');
    await tally.refused(t, restarted.url, 2, 'ZN_ERR_NODE_DELETED');
    // Its control link is refused NODE_DELETED again, which control-status.json keeps for `status`.
    await waitFor(() => countLines(restarted.proc, /"code":"NODE_DELETED".*"msg":"control session ended"/) > 0, { what: 'the restarted node to be refused NODE_DELETED', timeoutMs: 30_000 });
    await restarted.proc.stop();
    const status = await nodeStatusText(t, stateDir);
    t.match(status, /last error:\s+NODE_DELETED at /, '`zenova-node status` names the refusal');
    t.match(status, /what to do:\s+the node was deleted in the control plane and cannot come back/, 'says the node was deleted, and what to do');

    // Nothing the node answers after its deletion can be delivered: only what came before is debited.
    t.equal(await debitedRequests(cp, 'deleted-acct'), tally.served, `every priced call answered (${tally.served}) is debited`);
    t.equal((await balanceOf(cp, 'deleted-acct')).outstandingLeasesMicros, 0, "the lease's credit is back with the account");
  });

  await t.test('after a re-enrollment on another host, the old host refuses priced requests once its credentials are refused, and the account is debited every priced call answered', async (t) => {
    const apiKey = await account('moved-acct');
    const tally = new Tally(apiKey);
    const oldDir = join(work, 'moved-old');
    const newDir = join(work, 'moved-new');
    await enrollNewNode(t, cp, 'moved-edge', oldDir);
    const old = await startNodeServe(t, { stateDir: oldDir, env: NODE_ENV });
    await tally.firstServed(old.url, 'the old host to serve a priced call');
    await tally.serve(t, old.url, 3);
    await debitedAll(cp, 'moved-acct', tally, "the old host's calls to be debited");

    const command = await cp.api<{ command: string }>('POST', '/api/v1/nodes/moved-edge/reenroll-command', {});
    t.equal(command.status, 200);
    const enrolled = await runEnroll(t, { url: cp.url, token: tokenOf(command.body.command), stateDir: newDir, caFile: https.caFile });
    t.equal(enrolled.code, 0, `enrolled on the new host: ${enrolled.output.slice(-300)}`);
    // The connect loop's last word before its slow retry: no credential left to try.
    await waitFor(() => countLines(old.proc, /"level":50.*"code":"CREDENTIAL_REVOKED".*"msg":"control session ended"/) > 0, { what: 'the old host to be refused for good', timeoutMs: 30_000 });
    await tally.refused(t, old.url, 5);
    t.same(await unpricedCall(old.url, apiKey), { status: 200 }, 'an unpriced call is still served: a revoked credential withdraws the credit only');
    t.equal(countLines(old.proc, WITHDRAWN_LINE), 1, 'the withdrawal is logged once');
    t.match(old.proc.output(), /"level":50.*"code":"CREDENTIAL_REVOKED".*"suspendedLeaseIds":\["[^\]]+\].*its credit is withdrawn and its leases suspended/);

    const moved = await startNodeServe(t, { stateDir: newDir, env: NODE_ENV });
    await tally.firstServed(moved.url, 'the new host to serve a priced call');
    await tally.serve(t, moved.url, 3);
    await debitedAll(cp, 'moved-acct', tally, "the new host's calls to be debited");
    t.equal(await debitedRequests(cp, 'moved-acct'), tally.served, `every priced call answered (${tally.served}) is debited`);

    await t.test('a same-host re-enrollment while the node serves gives its credit back: priced requests are answered again, and debited', async (t) => {
      // The old host, cut off and still serving, is re-enrolled in place: now the new host is the old one.
      const back = await cp.api<{ command: string }>('POST', '/api/v1/nodes/moved-edge/reenroll-command', {});
      const again = await runEnroll(t, { url: cp.url, token: tokenOf(back.body.command), stateDir: oldDir, caFile: https.caFile, extra: ['--reenroll'] });
      t.equal(again.code, 0, `re-enrolled on the old host: ${again.output.slice(-300)}`);
      await tally.firstServed(old.url, 'the re-enrolled host to serve priced calls again');
      await tally.serve(t, old.url, 3);
      // The log line may reach the pipe after the answer does.
      await waitFor(() => /"msg":"a control session was established again: the node's credit is no longer withdrawn/.test(old.proc.output()), { what: 'the node to say its credit is back' });
      await waitFor(() => countLines(moved.proc, WITHDRAWN_LINE) > 0, { what: 'the other host to be cut off in turn', timeoutMs: 30_000 });
      await tally.refused(t, moved.url, 3);

      // And once more in place while it is live and serving (the common case): it serves again at once.
      const inPlace = await cp.api<{ command: string }>('POST', '/api/v1/nodes/moved-edge/reenroll-command', {});
      const third = await runEnroll(t, { url: cp.url, token: tokenOf(inPlace.body.command), stateDir: oldDir, caFile: https.caFile, extra: ['--reenroll'] });
      t.equal(third.code, 0, `re-enrolled in place: ${third.output.slice(-300)}`);
      await waitFor(() => countLines(old.proc, /"msg":"control session established"/) >= 3, { what: 'a session on the new credential', timeoutMs: 30_000 });
      await tally.firstServed(old.url, 'priced calls served after the in-place re-enrollment');
      await tally.serve(t, old.url, 3);
      await debitedAll(cp, 'moved-acct', tally, "the re-enrolled host's calls to be debited");
      t.equal(await debitedRequests(cp, 'moved-acct'), tally.served, `every priced call answered (${tally.served}) is debited`);
    });
  });
  await t.test('a node whose credential expired while it was offline serves priced requests from its lease, and once re-enrolled on this host every one is debited', async (t) => {
    const apiKey = await account('expired-acct');
    const tally = new Tally(apiKey);
    const stateDir = join(work, 'expired');
    const { node } = await enrollNewNode(t, cp, 'expired-edge', stateDir);
    const first = await startNodeServe(t, { stateDir, env: NODE_ENV });
    await tally.firstServed(first.url, 'the node to serve a priced call');
    await tally.serve(t, first.url, 3);
    await debitedAll(cp, 'expired-acct', tally, "the node's first calls to be debited");

    // Offline past its validity: killed (its lease stays open on disk), its credentials expire meanwhile.
    await first.proc.kill9();
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      await client.query("update node_credentials set expires_at = now() - interval '1 second' where node_id = $1 and revoked_at is null", [node.id]);
    } finally {
      await client.end();
    }
    const back = await startNodeServe(t, { stateDir, env: NODE_ENV });
    await waitFor(() => countLines(back.proc, /"level":50.*"code":"CREDENTIAL_EXPIRED".*"msg":"control session ended"/) > 0, { what: 'the node to be refused CREDENTIAL_EXPIRED', timeoutMs: 30_000 });
    await tally.serve(t, back.url, 5);
    t.equal(countLines(back.proc, WITHDRAWN_LINE), 0, 'its credit is not withdrawn');

    const command = await cp.api<{ command: string }>('POST', '/api/v1/nodes/expired-edge/reenroll-command', {});
    const again = await runEnroll(t, { url: cp.url, token: tokenOf(command.body.command), stateDir, caFile: https.caFile, extra: ['--reenroll'] });
    t.equal(again.code, 0, `re-enrolled on this host: ${again.output.slice(-300)}`);
    await debitedAll(cp, 'expired-acct', tally, 'the calls served while its credential was expired to be debited');
    t.equal(await debitedRequests(cp, 'expired-acct'), tally.served, `every priced call answered (${tally.served}) is debited`);
  });
});
