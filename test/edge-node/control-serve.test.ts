// The real `zenova-node serve --state-dir` process with a real TLS gateway: it connects, heartbeats
// with live figures, keeps answering callers while the gateway is gone, reconnects by itself when it
// is back, and `status --json` follows along.
import path from 'node:path';
import t from 'tap';
import { runCli } from '../../edge-node/src/cli/run-cli.js';
import type { NodeStatusReport } from '../../edge-node/src/status/node-status.js';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import { LISTENING, serveNode } from './served-node.js';

const MAIN = 'edge-node/src/main.ts';
const ESTABLISHED = /"msg":"control session established"/;

async function statusJson(stateDir: string): Promise<{ code: number; report: NodeStatusReport }> {
  let out = '';
  const code = await runCli(['status', '--state-dir', stateDir, '--json'], { stdout: { write: (s: string) => (out += s) }, stderr: { write: () => undefined } });
  return { code, report: JSON.parse(out) as NodeStatusReport };
}

t.test('serve keeps callers served through a control-plane outage and reconnects when it returns', async (t) => {
  const gateway = await startFakeGateway(t, { heartbeatIntervalMs: 100 });
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway);
  const { proc: node, url } = await serveNode(t, state.dir);
  await node.waitForLine(ESTABLISHED);

  const connected = await statusJson(state.dir);
  t.equal(connected.code, 0);
  t.match(connected.report, {
    enrolled: true,
    node: { id: state.identity.nodeId, name: 'edge-test' },
    gateway: { target: gateway.target, serverName: 'localhost' },
    control: { running: true, connected: true, sessionId: 'session-0' },
  });

  // Two model calls refused as not ready show up in the heartbeat figures, as errors; the health
  // check and the readiness probe (503 too) are no caller requests.
  t.equal((await fetch(`${url}/healthz`)).status, 200);
  t.equal((await fetch(`${url}/readyz`)).status, 503);
  t.equal((await fetch(`${url}/v1/models`)).status, 503, 'no config yet: the node is not ready');
  t.equal((await fetch(`${url}/v1/models`)).status, 503);
  const session = await gateway.waitForSession(0);
  const counted = await gateway.waitForMessage(session, (m) => (m.heartbeat?.requests5m ?? 0n) >= 2n, 'a heartbeat counting the two model calls');
  t.match(counted.heartbeat, { requests5m: 2n, errors5m: 2n }, 'the model calls only');

  gateway.stop();
  await node.waitForLine((line) => line.includes('"msg":"control session ended"') && line.includes('"established":true'));
  t.equal((await fetch(`${url}/healthz`)).status, 200, 'callers are still served while the control plane is away');
  const away = await waitFor(async () => {
    const { report } = await statusJson(state.dir);
    return report.control.connected === false ? report : undefined;
  }, { what: 'status to show the node disconnected' });
  t.match(away.control, { running: true, connected: false, sessionId: null, lastError: { code: /\w+/ } });

  await gateway.restart();
  await waitFor(() => parseJsonLines(node.output()).filter((l) => l.msg === 'control session established').length >= 2, {
    what: 'a second session after the gateway came back',
    timeoutMs: 30_000,
  });
  await waitFor(async () => (await statusJson(state.dir)).report.control.connected, { what: 'status to show the node connected again' });

  t.equal(await node.stop('SIGTERM'), 0, 'a clean stop');
  const stopped = await statusJson(state.dir);
  t.match(stopped.report.control, { running: false, connected: false });
  t.notOk(node.output().includes(state.credentials.current.secret), 'the credential is never logged');
});

t.test('serve with a state dir that was never enrolled stops with exit 2 and says to enroll', async (t) => {
  const dir = t.testdir({ state: {} });
  const entry = tsEntry(MAIN);
  const node = await startProcess({ name: 'zenova-node', command: entry.command, args: [...entry.args, 'serve', '--state-dir', path.join(dir, 'state')], t });
  t.equal((await node.exited).code, 2);
  t.match(node.output(), /is not enrolled \(no identity\.json\): run `zenova-node enroll/);
  t.notMatch(node.output(), LISTENING);
});
