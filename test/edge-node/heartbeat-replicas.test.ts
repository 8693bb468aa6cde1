// `zenova-node serve --replicas K`: each replica counts only the callers it serves, and only the one
// holding the control link sends heartbeats; the heartbeat's requests5m and errors5m (the control
// plane's requests5m / errorRate5m) are the node's, summed over every live replica, not the link
// holder's share. A replica killed -9 and started again counts from its restart: its old counts
// are gone, never counted twice.
import http from 'node:http';
import t from 'tap';
import type { Test } from 'tap';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import type { StartedProcess } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import type { FakeGateway, FakeSession } from './control-fixtures.js';
import { parsePrometheusText } from './metrics/prometheus-text.js';
import { logs, replicaScene } from './replica-serve.js';

const REPLICAS_LISTENING = /"msg":"node-edge replicas listening"/;

function serveReplicas(t: Test, stateDir: string, replicas: number): Promise<StartedProcess> {
  const { command, args } = tsEntry('edge-node/src/main.ts');
  return startProcess({
    name: 'zenova-node serve --replicas',
    command,
    args: [...args, 'serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0', '--replicas', String(replicas)],
    env: { ZENOVA_NODE_REPLICAS: undefined, ZENOVA_NODE_RECONNECT_BASE_MS: '100', ZENOVA_NODE_RECONNECT_MAX_MS: '500' },
    readyLine: REPLICAS_LISTENING,
    timeoutMs: 90_000,
    t,
  });
}

function urls(proc: StartedProcess): { url: string; adminUrl: string } {
  const ready = logs(proc).find((l) => l.msg === 'node-edge replicas listening');
  const admin = logs(proc).find((l) => l.msg === 'admin listening' && l.replica === undefined);
  return { url: String(ready?.url), adminUrl: String(admin?.url) };
}

/** The pid each replica slot runs now, from the supervisor's "starting" lines. */
function replicaPids(proc: StartedProcess): Map<number, number> {
  const pids = new Map<number, number>();
  for (const line of logs(proc)) {
    if (typeof line.msg === 'string' && /^node-edge replica \d+ starting$/.test(line.msg)) pids.set(Number(line.replica), Number(line.replicaPid));
  }
  return pids;
}

/** One chat request on a connection of its own (no keep-alive), so each goes to the next replica in turn; its status. */
function chat(url: string, key: string): Promise<number> {
  const body = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'ping' }] });
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${url}/v1/chat/completions`,
      { method: 'POST', agent: false, headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, 'content-length': Buffer.byteLength(body) } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** Chat requests answered per replica slot, from the supervisor's merged metrics. */
async function requestsByReplica(adminUrl: string): Promise<Map<string, number>> {
  const res = await fetch(`${adminUrl}/metrics`);
  const parsed = parsePrometheusText(await res.text());
  const out = new Map<string, number>();
  for (const s of parsed.samples) {
    if (s.name !== 'zenova_node_requests_total' || s.labels.api !== 'chat.completions') continue;
    const replica = s.labels.replica ?? 'none';
    out.set(replica, (out.get(replica) ?? 0) + s.value);
  }
  return out;
}

/** Waits until the newest session's latest heartbeat satisfies `pick`; its figures. */
async function heartbeatWhere(gateway: FakeGateway, pick: (requests: bigint, errors: bigint) => boolean, what: string): Promise<{ requests5m: bigint; errors5m: bigint }> {
  return waitFor(
    () => {
      const session: FakeSession | undefined = gateway.sessions.at(-1);
      const beat = session?.received.findLast((m) => m.heartbeat !== undefined)?.heartbeat;
      if (beat === undefined) return undefined;
      return pick(beat.requests5m, beat.errors5m) ? { requests5m: beat.requests5m, errors5m: beat.errors5m } : undefined;
    },
    { what, timeoutMs: 20_000 },
  );
}

t.test('with two replicas each serving callers, the heartbeat carries the requests and errors of both, not the link holder\'s share', async (t) => {
  const { stateDir, callerKey, upstream, gateway } = await replicaScene(t);
  const node = await serveReplicas(t, stateDir, 2);
  const { url, adminUrl } = urls(node);
  await gateway.waitForSession(0);

  const statuses: number[] = [];
  for (let i = 0; i < 10; i++) statuses.push(await chat(url, callerKey));
  // Two upstream failures: answered 5xx, counted as errors by whichever replica served them.
  upstream.setBehaviour({ failNext: { count: 2, status: 500 } });
  for (let i = 0; i < 4; i++) statuses.push(await chat(url, callerKey));
  const errors = statuses.filter((s) => s >= 500).length;
  t.ok(errors > 0, `some answers were 5xx (${statuses.join(' ')})`);
  t.equal(statuses.filter((s) => s === 200).length + errors, statuses.length, 'every answer is a 200 or a 5xx');

  const perReplica = await requestsByReplica(adminUrl);
  t.ok((perReplica.get('1') ?? 0) > 0 && (perReplica.get('2') ?? 0) > 0, `both replicas served callers (${[...perReplica].join(' ')})`);

  const beat = await heartbeatWhere(gateway, (requests) => requests === BigInt(statuses.length), `a heartbeat with requests5m ${statuses.length}`);
  t.equal(beat.requests5m, BigInt(statuses.length), 'requests5m: every request, on either replica');
  t.equal(beat.errors5m, BigInt(errors), 'errors5m: every 5xx, on either replica');
  t.equal(await node.stop('SIGTERM', 40_000), 0);
});

t.test('a replica killed -9 and started again counts from its restart: the heartbeat never counts its requests twice', async (t) => {
  const { stateDir, callerKey, gateway } = await replicaScene(t);
  const node = await serveReplicas(t, stateDir, 2);
  const { url, adminUrl } = urls(node);
  await gateway.waitForSession(0);
  const holder = await waitFor(() => logs(node).find((l) => l.msg === 'this process holds the control link' && typeof l.replica === 'number')?.replica as number | undefined, {
    what: 'the replica holding the control link',
  });
  const other = holder === 1 ? 2 : 1;

  for (let i = 0; i < 10; i++) t.equal(await chat(url, callerKey), 200);
  const before = await requestsByReplica(adminUrl);
  const killedServed = before.get(String(other)) ?? 0;
  t.ok(killedServed > 0, `replica ${other} (not the link holder) served callers`);
  await heartbeatWhere(gateway, (requests) => requests === 10n, 'a heartbeat counting all 10 requests');

  const killed = replicaPids(node).get(other)!;
  process.kill(killed, 'SIGKILL');
  await waitFor(() => {
    const pid = replicaPids(node).get(other);
    return pid !== undefined && pid !== killed && logs(node).some((l) => l.msg === 'node-edge listening' && l.pid === pid) ? pid : undefined;
  }, { what: `replica ${other} started again and listening`, timeoutMs: 60_000 });
  const holderServed = BigInt(10 - killedServed);
  await heartbeatWhere(gateway, (requests) => requests === holderServed, `a heartbeat with the link holder's ${holderServed} requests only: the killed process's are gone`);

  for (let i = 0; i < 6; i++) t.equal(await chat(url, callerKey), 200);
  const after = await requestsByReplica(adminUrl);
  t.ok((after.get(String(other)) ?? 0) > 0, `the restarted replica ${other} served callers`);
  // The link holder's requests, plus what the restarted replica served since its restart.
  const expected = BigInt(16 - killedServed);
  const beat = await heartbeatWhere(gateway, (requests) => requests === expected, `a heartbeat with requests5m ${expected}`);
  t.equal(beat.requests5m, expected, 'the killed process\'s requests are gone; the restarted one\'s counted once');
  t.equal(await node.stop('SIGTERM', 40_000), 0);
});
