/**
 * `zenova-node status` shows a node the control plane deleted as deleted — with what its operator
 * does next — as soon as the node refuses its callers with ZN_ERR_NODE_DELETED, whichever way the
 * node learned it: from its control link's refusal (NODE_DELETED, control-status.json), or from the
 * deletion kept in its credit lease book (credit-leases.sqlite), which a restarted node refuses by
 * from its first request, before any control session. Restarted while the control plane is out of
 * reach, such a node's link says only GATEWAY_UNREACHABLE ("keeps serving and reconnects by
 * itself"): status must still say it was deleted, not advise waiting.
 * Real control plane, PostgreSQL, node-edge and `zenova-node status` processes.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { callNodeDetailed, configureDemo, countLines, enrollNewNode, freePort, httpsMaterial, startControlPlane, startNodeServe, tempDir } from './stack.js';

interface StatusJson {
  control: { running: boolean | null; connected: boolean | null; lastError: { code: string } | null };
  deleted: { code: string; at: string; advice: string } | null;
}

/** `zenova-node status --state-dir D [--json]`: its exit code and standard output. */
async function nodeStatus(t: Test, stateDir: string, json = false): Promise<{ code: number | null; stdout: string }> {
  const { command, args } = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({ name: 'zenova-node status', command, args: [...args, 'status', '--state-dir', stateDir, ...(json ? ['--json'] : [])], t });
  const exit = await proc.exited;
  return { code: exit.code, stdout: proc.output() };
}

async function statusJson(t: Test, stateDir: string): Promise<StatusJson> {
  return JSON.parse((await nodeStatus(t, stateDir, true)).stdout) as StatusJson;
}

/** The deleted state as both forms of status give it. */
async function expectDeleted(t: Test, stateDir: string, why: string): Promise<string> {
  const text = await nodeStatus(t, stateDir);
  t.equal(text.code, 0, `${why}: status exits 0 (the node is still enrolled on this host)`);
  t.match(text.stdout, /\ndeleted:\s+DELETED in the control plane \(NODE_DELETED at [^)]+\): every caller request is refused with ZN_ERR_NODE_DELETED/, `${why}: status says the node was deleted`);
  t.match(text.stdout, /\nwhat to do:\s+the node was deleted in the control plane and cannot come back.*zenova gateway-node reenroll-command NAME/, `${why}: and what the operator does next`);
  t.notMatch(text.stdout, /reconnects by itself/, `${why}: never that it reconnects by itself`);
  const json = await statusJson(t, stateDir);
  t.match(json.deleted, { code: 'NODE_DELETED', at: /^\d{4}-/, advice: /cannot come back/ }, `${why}: --json gives the deletion`);
  return text.stdout;
}

t.test('zenova-node status shows a deleted node as deleted, with what to do, as soon as the node refuses requests with ZN_ERR_NODE_DELETED', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-status-deleted-');
  const https = await httpsMaterial(join(work, 'https'));
  const cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw'), gatewayPort: await freePort() });
  const upstream = await startFakeUpstream(t);
  const { apiKey } = await configureDemo(cp, upstream.url, 'status-deleted');
  const stateDir = join(work, 'node');
  await enrollNewNode(t, cp, 'status-deleted-edge', stateDir);

  const node = await startNodeServe(t, { stateDir, env: { ZENOVA_LEASE_REPORT_MS: '200' } });
  await waitFor(async () => (await callNodeDetailed(node.url, apiKey)).status === 200, { what: 'the node to serve a call', timeoutMs: 30_000 });
  const before = await statusJson(t, stateDir);
  t.equal(before.deleted, null, 'not deleted before the deletion');
  t.equal(before.control.connected, true, 'connected before the deletion');
  t.notMatch((await nodeStatus(t, stateDir)).stdout, /DELETED/, 'the text says nothing of a deletion');

  t.equal((await cp.api('DELETE', '/api/v1/nodes/status-deleted-edge')).status, 200);
  // The moment the node refuses callers as deleted, status says so: no waiting for anything else.
  await waitFor(async () => (await callNodeDetailed(node.url, apiKey)).code === 'ZN_ERR_NODE_DELETED', { what: 'the node to refuse a call as deleted', timeoutMs: 30_000 });
  await expectDeleted(t, stateDir, 'while serving');

  await t.test('restarted while the control plane is out of reach, the node refuses every call from its lease book, and status says it was deleted, not that it reconnects by itself', async (t) => {
    await node.proc.stop();
    await cp.proc.stop();
    const restarted = await startNodeServe(t, { stateDir });
    t.match(await callNodeDetailed(restarted.url, apiKey), { status: 503, code: 'ZN_ERR_NODE_DELETED' }, 'refused as deleted from its first request');
    // control-status.json now holds the link's own last word: the gateway cannot be reached.
    await waitFor(() => countLines(restarted.proc, /"code":"GATEWAY_UNREACHABLE".*"msg":"control session ended"/) > 0, { what: 'the restarted node to find the gateway unreachable', timeoutMs: 30_000 });
    const text = await expectDeleted(t, stateDir, 'restarted, control plane down');
    t.match(text, /last error:\s+GATEWAY_UNREACHABLE/, "the link's own error is still shown");
    const json = await statusJson(t, stateDir);
    t.match(json.control, { running: true, connected: false, lastError: { code: 'GATEWAY_UNREACHABLE' } });

    await restarted.proc.stop();
    // Stopped, the book is read through a private copy: status writes nothing beside it.
    const sidecars = (): boolean[] => ['-wal', '-shm'].map((s) => existsSync(join(stateDir, `credit-leases.sqlite${s}`)));
    const sidecarsBefore = sidecars();
    await expectDeleted(t, stateDir, 'node-edge stopped');
    t.same(sidecars(), sidecarsBefore, "status made no -wal or -shm beside the stopped node's lease book");
  });
});
