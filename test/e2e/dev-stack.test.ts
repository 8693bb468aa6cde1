/**
 * `npm start` as a new user runs it: the dev stack comes up on embedded PostgreSQL, the printed curl
 * goes through office-primary to the demo upstream, Ctrl-C stops every child, and a second start
 * reuses the same data and secrets.
 */
import t from 'tap';
import type { Test } from 'tap';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, fetch as undiciFetch } from 'undici';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';

const home = mkdtempSync(join(tmpdir(), 'zn-devstack-'));
// Traversable like a checkout, so the cluster lives inside it (and goes with the teardown).
chmodSync(home, 0o755);
t.teardown(() => rmSync(home, { recursive: true, force: true }));

function env(): NodeJS.ProcessEnv {
  const e: NodeJS.ProcessEnv = { ...process.env, ZENOVA_DEV_HOME: home, ZENOVA_DEV_PORTS: 'auto' };
  // The runner's shell may name a database of its own; the stack under test uses its embedded one.
  delete e.ZENOVA_DATABASE_URL;
  return e;
}

/** A process's environment as the kernel holds it. */
function environOf(pid: number): Record<string, string> {
  const entries = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').filter((e) => e.includes('='));
  return Object.fromEntries(entries.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
}

function readDevEnv(): Record<string, string> {
  return Object.fromEntries(
    readFileSync(join(home, 'dev.env'), 'utf8').trim().split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
}

/** dev.env and the control plane's installation are the first start's: same key, same database. */
async function expectSameInstallation(t: Test): Promise<void> {
  const devEnv = readDevEnv();
  t.equal(devEnv.ZENOVA_API_KEY, firstKey, 'same demo API key');
  const agent = new Agent({ connect: { ca: readFileSync(devEnv.ZENOVA_CA_FILE!, 'utf8') } });
  t.teardown(() => agent.close());
  const version = (await (await undiciFetch(`${devEnv.ZENOVA_CONTROL_PLANE_URL}/api/version`, { dispatcher: agent })).json()) as { installationId: string };
  t.equal(version.installationId, firstInstallation, 'same database (installation id survives)');
}


function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function startStack(tt: { teardown(fn: () => unknown): void }, extraEnv: NodeJS.ProcessEnv = {}) {
  const { command, args } = tsEntry('control-plane/src/dev-stack/main.ts');
  const proc = await startProcess({ name: 'dev-stack', command, args, env: { ...env(), ...extraEnv }, readyLine: /"msg":"dev stack ready"/, timeoutMs: 180_000, t: tt });
  const readyLine = await proc.waitForLine(/"msg":"dev stack ready"/);
  const ready = JSON.parse(readyLine) as { pids: { controlPlane: number; node: number; postgres: number } };
  return { proc, pids: ready.pids };
}

let firstKey = '';
let firstInstallation = '';

t.test('a first start prints a curl that answers 200 with x-request-id through office-primary', async (t) => {
  const { proc, pids } = await startStack(t);
  const devEnv = readDevEnv();
  for (const k of ['ZENOVA_BASE_URL', 'ZENOVA_API_KEY', 'ZENOVA_CONSOLE_URL', 'ZENOVA_CONTROL_PLANE_URL', 'ZENOVA_ADMIN_TOKEN', 'ZENOVA_DATABASE_URL', 'ZENOVA_CA_FILE']) {
    t.ok(devEnv[k], `dev.env has ${k}`);
  }
  t.match(devEnv.ZENOVA_BASE_URL, /\/v1$/);
  t.equal(statSync(join(home, 'dev.env')).mode & 0o077, 0, 'dev.env holds secrets and is private');

  const curlLine = proc.output().split('\n').find((l) => l.trim().startsWith('curl '));
  t.ok(curlLine, 'a ready curl is printed');
  const answer = execFileSync('/bin/sh', ['-c', curlLine!.trim()], { encoding: 'utf8' });
  t.match(answer, /^HTTP\/1\.1 200/);
  t.match(answer, /\nx-request-id: \S+/i);
  t.match(answer, /\[zenova demo upstream\] echo: hello from curl/);

  const noKey = await fetch(`${devEnv.ZENOVA_BASE_URL}/models`);
  t.equal(noKey.status, 401, 'the node asks for the API key');

  t.match(devEnv.ZENOVA_CONTROL_PLANE_URL, /^https:\/\//, 'the control plane speaks HTTPS');
  const agent = new Agent({ connect: { ca: readFileSync(devEnv.ZENOVA_CA_FILE!, 'utf8') } });
  t.teardown(() => agent.close());
  const version = (await (await undiciFetch(`${devEnv.ZENOVA_CONTROL_PLANE_URL}/api/version`, { dispatcher: agent })).json()) as { installationId: string };
  t.ok(version.installationId);
  const office = await waitFor(async () => {
    const res = await undiciFetch(`${devEnv.ZENOVA_CONTROL_PLANE_URL}/api/v1/nodes/office-primary`, { dispatcher: agent, headers: { authorization: `Bearer ${devEnv.ZENOVA_ADMIN_TOKEN}` } });
    const v = (await res.json()) as { status: string; onboardingStage: string };
    return v.status === 'online' ? v : undefined;
  }, { what: 'office-primary online', timeoutMs: 30_000 });
  t.match(office.onboardingStage, /first-heartbeat|config-synced/, 'office-primary was enrolled through the control plane');
  firstKey = devEnv.ZENOVA_API_KEY!;
  firstInstallation = version.installationId;

  // Ctrl-C under `npm start` arrives twice (directly and relayed by tsx); the second must not cut
  // the shutdown short and orphan a child.
  proc.child.kill('SIGINT');
  proc.child.kill('SIGINT');
  const exit = await proc.exited;
  t.equal(exit.code, 0, 'Ctrl-C ends the dev stack cleanly');
  t.match(proc.output(), /stopped\./, 'and it says so once everything is down');
  for (const [name, pid] of Object.entries(pids)) {
    await waitFor(() => !alive(pid), { what: `${name} (pid ${pid}) to be gone`, timeoutMs: 20_000 });
    t.notOk(alive(pid), `${name} was stopped`);
  }
});

t.test('a second start reuses the database and the secrets', async (t) => {
  const { proc } = await startStack(t);
  await expectSameInstallation(t);
  t.match(proc.output(), /reusing/);
  t.notMatch(proc.output(), /enrolled \(state/, 'office-primary keeps its identity; no new enrollment');
  // The restarted node serves its cached config at once and the control plane has nothing newer to
  // push: the banner must say so, not wait 30 s for a push and then report "no config yet".
  t.match(proc.output(), /\(node office-primary, config v\d+ from (its cache|the control plane)\)/, 'the banner names the config the node serves');
  t.notMatch(proc.output(), /no config yet/, 'the banner does not call a serving node config-less');
  t.notMatch(proc.output(), /has not received its config/, 'and no warning says so either');
  proc.child.kill('SIGTERM');
  t.equal((await proc.exited).code, 0);
});

t.test('a start from a shell that sourced dev.env reuses the embedded database and keeps its secrets from the node', async (t) => {
  // README: `set -a; . .zenova/dev.env; set +a`, then `npm start` again from that shell.
  const sourced = readDevEnv();
  t.ok(sourced.ZENOVA_DATABASE_URL, 'dev.env exports the embedded database URL');
  const { proc, pids } = await startStack(t, sourced);
  t.match(proc.output(), /this stack's own embedded database/, 'the URL is recognised as the stack\'s own');
  t.ok(pids.postgres, 'the embedded PostgreSQL was started');
  await expectSameInstallation(t);

  const nodeEnv = environOf(pids.node);
  for (const name of ['ZENOVA_ADMIN_TOKEN', 'ZENOVA_DATABASE_URL', 'ZENOVA_API_KEY', 'ZENOVA_SECRET_ENC_KEY']) {
    t.notOk(name in nodeEnv, `office-primary's process has no ${name}`);
  }
  t.notOk(Object.values(nodeEnv).some((v) => v.includes(sourced.ZENOVA_ADMIN_TOKEN!)), 'nor the admin token under another name');
  t.ok(environOf(pids.controlPlane).ZENOVA_DATABASE_URL, 'the control plane still gets its database');
  proc.child.kill('SIGINT');
  t.equal((await proc.exited).code, 0);
});
