/**
 * Ctrl-C on `npm start` as a terminal delivers it: SIGINT to the whole foreground process group.
 * Only the dev stack may get it; it then stops office-primary first (one stop signal, so running
 * requests drain and the node's lease returns reach a control plane still up), then the control
 * plane, then PostgreSQL, and says "stopped.".
 */
import t from 'tap';
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';

const home = mkdtempSync(join(tmpdir(), 'zn-devstack-ctrlc-'));
// Traversable like a checkout, so the cluster lives inside it (and goes with the teardown).
chmodSync(home, 0o755);
t.teardown(() => rmSync(home, { recursive: true, force: true }));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function logLines(name: string): Array<Record<string, unknown>> {
  return parseJsonLines(readFileSync(join(home, 'logs', `${name}.log`), 'utf8'));
}

t.test('Ctrl-C to the terminal process group stops office-primary, then the control plane, each with one signal', async (t) => {
  const env: NodeJS.ProcessEnv = { ZENOVA_DEV_HOME: home, ZENOVA_DEV_PORTS: 'auto', ZENOVA_DATABASE_URL: undefined };
  const { command, args } = tsEntry('control-plane/src/dev-stack/main.ts');
  // startProcess spawns it as the leader of a process group of its own: the terminal's foreground group.
  const proc = await startProcess({ name: 'dev-stack', command, args, env, readyLine: /"msg":"dev stack ready"/, timeoutMs: 180_000, t });
  const { pids } = JSON.parse(await proc.waitForLine(/"msg":"dev stack ready"/)) as { pids: { controlPlane: number; node: number; postgres: number } };

  process.kill(-proc.child.pid!, 'SIGINT');
  const exit = await proc.exited;
  t.equal(exit.code, 0, 'the dev stack ends cleanly');
  t.match(proc.output(), /stopped\./, 'and says so once everything is down');
  for (const [name, pid] of Object.entries(pids)) {
    await waitFor(() => !alive(pid), { what: `${name} (pid ${pid}) to be gone`, timeoutMs: 20_000 });
  }

  const node = logLines('office-primary');
  const nodeStopping = node.filter((l) => l.msg === 'node-edge stopping');
  t.same(nodeStopping.map((l) => l.signal), ['SIGTERM'], "office-primary got one stop signal, the dev stack's");
  t.notOk(node.some((l) => typeof l.msg === 'string' && l.msg.startsWith('a second stop signal')), 'its running requests were not cut short');
  const nodeStopped = node.find((l) => l.msg === 'node-edge stopped');
  t.ok(nodeStopped, 'office-primary finished its shutdown');

  const cp = logLines('control-plane');
  const cpStopping = cp.filter((l) => l.msg === 'shutting down');
  t.same(cpStopping.map((l) => l.signal), ['SIGTERM'], "the control plane got one stop signal, the dev stack's");
  t.notOk(cp.some((l) => l.msg === 'second signal during shutdown; exiting now'), 'and did not exit mid-shutdown');
  t.ok(
    Date.parse(String(cpStopping[0]?.time)) >= Date.parse(String(nodeStopped?.time)),
    'the control plane began stopping only after office-primary had stopped (its lease returns could still be confirmed)',
  );
});
