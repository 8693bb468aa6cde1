// `zenova-node serve --replicas K`: one command runs K node-edge processes on one state dir that
// share one caller port (Node 20 has no reusePort, so separate processes could not), supervised by
// the serve process: every replica answers callers, each request is spooled once, a replica killed
// with -9 is started again while the node keeps serving, SIGTERM (also to the whole process group,
// as systemd's default control-group kill sends it) drains every replica and ends with exit 0, and
// the one admin port merges the replicas' metrics with a replica label. Bad command lines, an
// environment that disagrees and a replica refusing its settings end with exit 2, without a restart loop.
import { spawnSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import tls from 'node:tls';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import { parseCli } from '../../edge-node/src/cli/args.js';
import { runCli } from '../../edge-node/src/cli/run-cli.js';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import type { StartedProcess } from '../fixtures/processes.js';
import { tempDir } from '../e2e/stack.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';
import type { TestCa } from '../fixtures/tls.js';
import { waitFor } from '../fixtures/wait-for.js';
import { parsePrometheusText } from './metrics/prometheus-text.js';
import type { ParsedMetrics } from './metrics/prometheus-text.js';
import { logs, replicaScene } from './replica-serve.js';

const REPLICAS_LISTENING = /"msg":"node-edge replicas listening"/;

function serveReplicas(t: Test, stateDir: string, extraArgs: string[], env: NodeJS.ProcessEnv = {}, readyLine?: RegExp): Promise<StartedProcess> {
  const { command, args } = tsEntry('edge-node/src/main.ts');
  return startProcess({
    name: 'zenova-node serve --replicas',
    command,
    args: [...args, 'serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0', ...extraArgs],
    env: { ZENOVA_NODE_REPLICAS: undefined, ZENOVA_NODE_RECONNECT_BASE_MS: '100', ZENOVA_NODE_RECONNECT_MAX_MS: '500', ...env },
    ...(readyLine !== undefined ? { readyLine } : {}),
    timeoutMs: 90_000,
    t,
  });
}

/** The caller URL and the admin URL the supervisor logged. */
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

/**
 * One chat request on a connection of its own (no keep-alive), so the supervisor hands each to the
 * next replica in turn: its status and the request id the node answered with.
 */
function chat(url: string, key: string): Promise<{ status: number; requestId: string }> {
  const body = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'ping' }] });
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${url}/v1/chat/completions`,
      { method: 'POST', agent: false, headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, 'content-length': Buffer.byteLength(body) } },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, requestId: String(res.headers['x-request-id']) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

async function scrape(adminUrl: string): Promise<{ text: string; parsed: ParsedMetrics }> {
  const res = await fetch(`${adminUrl}/metrics`);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  return { text, parsed: parsePrometheusText(text) };
}

/** Finished requests per replica label, from the merged metrics. */
function requestsByReplica(parsed: ParsedMetrics): Map<string, number> {
  const out = new Map<string, number>();
  for (const s of parsed.samples) {
    if (s.name !== 'zenova_node_requests_total' || s.labels.api !== 'chat.completions') continue;
    const replica = s.labels.replica ?? 'none';
    out.set(replica, (out.get(replica) ?? 0) + s.value);
  }
  return out;
}

function spooledRequestIds(stateDir: string): string[] {
  const db = new Database(path.join(stateDir, 'spool.db'), { readonly: true, fileMustExist: true });
  try {
    return (db.prepare('select request_id from records').all() as Array<{ request_id: string }>).map((r) => r.request_id);
  } finally {
    db.close();
  }
}

t.test('two replicas share one caller port, both answer, every request is spooled once, a replica killed -9 is started again, and SIGTERM stops them cleanly', async (t) => {
  const { stateDir, callerKey } = await replicaScene(t);
  const node = await serveReplicas(t, stateDir, ['--replicas', '2', '--admin-listen', '127.0.0.1:0'], {}, REPLICAS_LISTENING);
  const { url, adminUrl } = urls(node);
  t.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
  t.match(adminUrl, /^http:\/\/127\.0\.0\.1:\d+$/);
  const firstPids = replicaPids(node);
  t.equal(firstPids.size, 2, 'two replica processes');
  t.not(firstPids.get(1), firstPids.get(2));

  const sent: string[] = [];
  for (let i = 0; i < 20; i++) {
    const answer = await chat(url, callerKey);
    t.equal(answer.status, 200);
    sent.push(answer.requestId);
  }
  const { text, parsed } = await scrape(adminUrl);
  const perReplica = requestsByReplica(parsed);
  t.same([...perReplica.keys()].sort(), ['1', '2'], 'every sample carries a replica label');
  t.ok((perReplica.get('1') ?? 0) > 0 && (perReplica.get('2') ?? 0) > 0, `both replicas answered (${[...perReplica].join(' ')})`);
  t.equal((perReplica.get('1') ?? 0) + (perReplica.get('2') ?? 0), 20, 'the replicas together finished every request');
  t.equal(text.match(/^# TYPE zenova_node_requests_total /gm)?.length, 1, 'one TYPE line per family');
  t.ok(parsed.samples.every((s) => s.labels.replica !== undefined || s.name === 'zenova_node_replicas'), 'a replica label on every sample');
  t.equal(parsed.samples.find((s) => s.name === 'zenova_node_replica_up' && s.labels.replica === '1')?.value, 1);
  t.equal(parsed.samples.find((s) => s.name === 'zenova_node_replica_up' && s.labels.replica === '2')?.value, 1);
  const ready = await fetch(`${adminUrl}/readyz`);
  t.equal(ready.status, 200, 'the admin /readyz: every replica ready');
  t.match(await ready.json(), { ready: true, replicas: [{ replica: 1, ready: true, configVersion: 1 }, { replica: 2, ready: true, configVersion: 1 }] });
  t.equal((await fetch(`${adminUrl}/healthz`)).status, 200);

  // kill -9 replica 1: the supervisor starts it again; the node keeps serving throughout.
  const killed = firstPids.get(1)!;
  process.kill(killed, 'SIGKILL');
  const restarted = await waitFor(() => {
    const pid = replicaPids(node).get(1);
    return pid !== undefined && pid !== killed && logs(node).some((l) => l.msg === 'node-edge listening' && l.pid === pid) ? pid : undefined;
  }, { what: 'replica 1 started again and listening', timeoutMs: 60_000 });
  t.match(logs(node).find((l) => typeof l.msg === 'string' && l.msg.startsWith('node-edge replica 1 exited unexpectedly')), { replica: 1, replicaPid: killed, signal: 'SIGKILL', code: null });
  for (let i = 0; i < 10; i++) {
    const answer = await chat(url, callerKey);
    t.equal(answer.status, 200, 'served after the restart');
    sent.push(answer.requestId);
  }
  const after = await scrape(adminUrl);
  t.equal(after.parsed.samples.find((s) => s.name === 'zenova_node_replica_restarts_total' && s.labels.replica === '1')?.value, 1, 'the restart is counted');
  t.ok((requestsByReplica(after.parsed).get('1') ?? 0) > 0, `the restarted replica ${restarted} answers callers`);

  t.equal(await node.stop('SIGTERM', 40_000), 0, 'SIGTERM: every replica stopped cleanly, exit 0');
  t.equal(logs(node).filter((l) => l.msg === 'node-edge stopped' && l.replica !== undefined).length, 2, 'both replicas stopped');
  const spooled = spooledRequestIds(stateDir);
  t.equal(spooled.length, sent.length, 'as many records as requests');
  t.same(new Set(spooled), new Set(sent), 'each request spooled once, under the id it was answered with');
});

t.test('SIGTERM to the whole process group, as systemd sends it, drains the requests in flight on every replica and exits 0', async (t) => {
  const { stateDir, callerKey, upstream } = await replicaScene(t);
  const node = await serveReplicas(t, stateDir, ['--replicas', '2'], {}, REPLICAS_LISTENING);
  const { url } = urls(node);
  upstream.setBehaviour({ latencyMs: 1_500 });
  const before = upstream.requests.length;
  const inFlight = [chat(url, callerKey), chat(url, callerKey)];
  await waitFor(() => upstream.requests.length >= before + 2, { what: 'both requests at the upstream' });
  // Each replica gets the signal itself and the supervisor's stop order: still one drain, not "now".
  process.kill(-node.child.pid!, 'SIGTERM');
  const answers = await Promise.all(inFlight);
  t.same(answers.map((a) => a.status), [200, 200], 'both requests in flight finished');
  t.equal((await node.exited).code, 0);
  const stopped = logs(node).filter((l) => l.msg === 'node-edge stopped' && l.replica !== undefined).map((l) => l.replica);
  t.same(stopped.sort(), [1, 2], 'both replicas drained and stopped');
  t.notOk(logs(node).some((l) => typeof l.msg === 'string' && l.msg.includes('the requests still running are ended')), 'nothing was cut short');
  t.same(new Set(spooledRequestIds(stateDir)), new Set(answers.map((a) => a.requestId)));
});

// A python3 datagram socket stands in for systemd's notify socket (as in test/installer/sd-notify.test.ts).
const NOTIFY_RECEIVER = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("bound", flush=True)
while True:
    print("got " + s.recv(4096).decode().replace("\\n", "|"), flush=True)
`;
const hasNotifyTools = spawnSync('python3', ['--version']).status === 0 && spawnSync('systemd-notify', ['--version']).status === 0;

function writePair(dir: string, pair: { certPem: string; keyPem: string }): { certFile: string; keyFile: string } {
  const certFile = path.join(dir, 'cert.pem');
  const keyFile = path.join(dir, 'key.pem');
  writeFileSync(certFile, pair.certPem);
  writeFileSync(keyFile, pair.keyPem, { mode: 0o600 });
  return { certFile, keyFile };
}

/** The serial of the certificate a new TLS connection to `port` is shown. */
function servedSerial(port: number, ca: TestCa): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca: ca.certPem }, () => {
      const serial = socket.getPeerCertificate().serialNumber;
      socket.end();
      resolve(serial);
    });
    socket.once('error', reject);
  });
}

t.test(
  'systemd hears READY=1 once, from the supervisor, when every replica listens, and STOPPING=1; SIGHUP reloads the TLS pair in every replica',
  { skip: hasNotifyTools ? false : 'python3 or systemd-notify missing on this machine: NOT TESTED' },
  async (t) => {
    const { stateDir } = await replicaScene(t);
    // A socket path must be short (108 bytes): not under the test's own dir.
    const dir = tempDir(t, 'zn-replicas-');
    const socketPath = path.join(dir, 'notify.sock');
    const receiver = await startProcess({ name: 'notify receiver', command: 'python3', args: ['-c', NOTIFY_RECEIVER, socketPath], readyLine: /^bound$/, t });
    const ca = await createTestCa();
    const first = await issueServerCert(ca, { ipAddresses: ['127.0.0.1'] });
    const files = writePair(dir, first);
    const node = await serveReplicas(t, stateDir, ['--replicas', '2', '--tls-cert', files.certFile, '--tls-key', files.keyFile], { NOTIFY_SOCKET: socketPath }, REPLICAS_LISTENING);
    const ready = await receiver.waitForLine(/READY=1/, 20_000);
    t.match(ready, new RegExp(`MAINPID=${node.child.pid}\\b`), "the supervisor's pid, the unit's main pid");
    t.match(ready, /STATUS=serving on https:\/\/127\.0\.0\.1:\d+ with 2 replicas/);
    const port = Number(new URL(urls(node).url).port);
    for (let i = 0; i < 4; i++) t.equal(await servedSerial(port, ca), new X509Certificate(first.certPem).serialNumber);

    const renewed = await issueServerCert(ca, { ipAddresses: ['127.0.0.1'] });
    writePair(dir, renewed);
    node.child.kill('SIGHUP');
    await waitFor(() => logs(node).filter((l) => l.msg === 'node-edge reloaded its TLS certificate').length === 2, { what: 'both replicas reloading' });
    t.same(logs(node).filter((l) => l.msg === 'node-edge reloaded its TLS certificate').map((l) => l.replica).sort(), [1, 2]);
    // Connections go to the replicas in turn: four in a row reach both.
    for (let i = 0; i < 4; i++) t.equal(await servedSerial(port, ca), new X509Certificate(renewed.certPem).serialNumber, 'the renewed pair on every replica');

    t.equal(await node.stop('SIGTERM', 40_000), 0);
    await receiver.waitForLine(/STOPPING=1/);
    t.equal(receiver.output().split('\n').filter((l) => l.includes('READY=1')).length, 1, 'READY=1 once: the replicas send none');
  },
);

t.test('a replica refusing its settings (exit 2) at start stops the node with exit 2, without a restart loop', async (t) => {
  const notEnrolled = t.testdir({});
  const node = await serveReplicas(t, notEnrolled, ['--replicas', '2']);
  t.equal((await node.exited).code, 2);
  t.match(node.output(), /is not enrolled \(no identity\.json\)/);
  t.ok(logs(node).filter((l) => typeof l.msg === 'string' && /^node-edge replica \d+ starting$/.test(l.msg)).length <= 2, 'no replica started again');
  t.notOk(logs(node).some((l) => typeof l.msg === 'string' && l.msg.includes('exited unexpectedly')));
});

t.test('--replicas K disagreeing with ZENOVA_NODE_REPLICAS is refused with exit 2 and one line, before any replica starts', async (t) => {
  const { stateDir } = await replicaScene(t);
  const node = await serveReplicas(t, stateDir, ['--replicas', '2'], { ZENOVA_NODE_REPLICAS: '3' });
  t.equal((await node.exited).code, 2);
  t.equal(
    node.output().trim(),
    'zenova-node: --replicas 2 disagrees with ZENOVA_NODE_REPLICAS="3" in the environment: --replicas sets it for the processes it starts; remove ZENOVA_NODE_REPLICAS (or set it to 2)',
  );
  const agreeing = await serveReplicas(t, stateDir, ['--replicas', '2'], { ZENOVA_NODE_REPLICAS: '2' }, REPLICAS_LISTENING);
  t.equal(await agreeing.stop('SIGTERM', 40_000), 0, 'the same number in both is fine');
});

t.test('--replicas takes 1 to 999, needs --state-dir above 1, and is in serve --help', async (t) => {
  for (const bad of ['0', '1000', '-1']) {
    t.throws(() => parseCli(['serve', '--state-dir', 'd', `--replicas=${bad}`]), { name: 'UsageError', message: `--replicas must be a whole number from 1 to 999 (node-edge processes sharing the caller port), got ${JSON.stringify(bad)}` }, bad);
  }
  for (const bad of ['abc', '2.5']) {
    t.throws(() => parseCli(['serve', '--state-dir', 'd', `--replicas=${bad}`]), { name: 'UsageError', message: '--replicas must be a whole number from 1 to 999 (node-edge processes sharing the caller port), got a value that is not one (not shown: it does not look like a number)' }, bad);
  }
  t.throws(() => parseCli(['serve', '--state-dir', 'd', '--replicas', '']), /--replicas is empty/);
  t.throws(() => parseCli(['serve', '--config', 'c.json', '--replicas', '2']), /--replicas 2 needs --state-dir/);
  t.match(parseCli(['serve', '--config', 'c.json', '--replicas', '1']), { kind: 'serve', replicas: 1 });
  t.match(parseCli(['serve', '--state-dir', 'd', '--replicas', '999']), { kind: 'serve', replicas: 999 });
  t.notOk('replicas' in parseCli(['serve', '--state-dir', 'd']), 'absent unless given');
  let stderr = '';
  const code = await runCli(['serve', '--state-dir', 'd', '--replicas', '0'], { stdout: { write: () => true }, stderr: { write: (s: string) => (stderr += s) } });
  t.equal(code, 2);
  t.match(stderr, /^zenova-node: --replicas must be a whole number from 1 to 999 .*got "0"\n\nUsage: zenova-node serve/);
  let help = '';
  t.equal(await runCli(['serve', '--help'], { stdout: { write: (s: string) => (help += s) }, stderr: { write: () => true } }), 0);
  t.match(help, /--replicas K {10}Run K node-edge processes/);
});
