// `zenova-node status` and `zenova-node doctor` read the state dir (and, for doctor, probe the
// gateway over real TLS) without changing anything.
import { spawn } from 'node:child_process';
import { chmod, readFile, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { runNodeCli as run } from './cli-capture.js';
import { saveControlStatus } from '../../edge-node/src/control/control-status.js';
import { saveCredentials } from '../../edge-node/src/state/credential-store.js';
import { createTestCa } from '../fixtures/tls.js';
import { newCredential, startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import type { EnrolledState } from './control-fixtures.js';

/** Names, modes and contents of everything in the dir, to prove a command changed nothing. */
async function snapshot(dir: string): Promise<string[]> {
  const names = (await readdir(dir)).sort();
  const rows = [`. ${((await stat(dir)).mode & 0o777).toString(8)}`];
  for (const name of names) {
    const file = path.join(dir, name);
    rows.push(`${name} ${((await stat(file)).mode & 0o777).toString(8)} ${await readFile(file, 'utf8')}`);
  }
  return rows;
}

/** The pid of a process that has already exited. */
function deadPid(): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', '']);
    child.on('error', reject);
    child.on('exit', () => resolve(child.pid!));
  });
}

async function recordStatus(state: EnrolledState, pid: number, connected: boolean): Promise<void> {
  await saveControlStatus(state.store, {
    connected,
    since: new Date().toISOString(),
    lastError: connected ? null : { code: 'CREDENTIAL_EXPIRED', message: 'expired', at: new Date().toISOString(), advice: 're-enroll this node' },
    sessionId: connected ? 'session-9' : null,
    pid,
    serving: true,
    updatedAt: new Date().toISOString(),
  });
}

t.test('status of a node that never ran shows its identity and that node-edge has not run', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const text = await run(['status', '--state-dir', state.dir]);
  t.equal(text.code, 0);
  t.match(text.stdout, `edge-test (id ${state.identity.nodeId})`);
  t.match(text.stdout, /control plane:\s+https:\/\/control\.example:8080/);
  t.match(text.stdout, /node-edge:\s+has not run with this state dir/);
  t.notOk(text.stdout.includes(state.credentials.current.secret), 'the credential is not shown');
  const json = await run(['status', '--state-dir', state.dir, '--json']);
  t.match(JSON.parse(json.stdout), { enrolled: true, control: { running: false, connected: false, since: null } });
});

t.test('status shows the last error and its advice while connected is false, and ignores a dead process\'s claim', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  await recordStatus(state, process.pid, false);
  const live = await run(['status', '--state-dir', state.dir]);
  t.match(live.stdout, /control link:\s+not connected since/);
  t.match(live.stdout, /last error:\s+CREDENTIAL_EXPIRED/);
  t.match(live.stdout, /what to do:\s+re-enroll this node/);

  // A file that says "connected" from a process that no longer exists (kill -9) is not believed.
  await recordStatus(state, await deadPid(), true);
  const stale = JSON.parse((await run(['status', '--state-dir', state.dir, '--json'])).stdout);
  t.match(stale.control, { running: false, connected: false, sessionId: null });
});

t.test('status of a missing or unenrolled state dir exits 1 and creates nothing', async (t) => {
  const dir = t.testdir({ empty: {} });
  const missing = await run(['status', '--state-dir', path.join(dir, 'absent'), '--json']);
  t.equal(missing.code, 1);
  t.match(JSON.parse(missing.stdout), { enrolled: false, error: /does not exist/ });
  t.same(await readdir(dir), ['empty'], 'nothing created');
  const empty = await run(['status', '--state-dir', path.join(dir, 'empty')]);
  t.equal(empty.code, 1);
  t.match(empty.stdout, /not enrolled/);
});

t.test('doctor passes a healthy state dir and a reachable, trusted gateway, and changes nothing', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  await chmod(state.dir, 0o700);
  const before = await snapshot(state.dir);
  const result = await run(['doctor', '--state-dir', state.dir]);
  t.equal(result.code, 0, result.stdout);
  t.match(result.stdout, /ok\s+state dir .* \(mode 0700\)/);
  t.match(result.stdout, /ok\s+credential valid until/);
  t.match(result.stdout, /ok\s+gateway 127\.0\.0\.1:\d+ reachable over TCP/);
  t.match(result.stdout, /ok\s+gateway TLS certificate trusted \(pinned CA\) and valid for "localhost"/);
  t.match(result.stdout, /all checks passed/);
  t.same(await snapshot(state.dir), before, 'the state dir is unchanged');
});

t.test('doctor fails loose modes, an expired credential and an untrusted gateway, each with advice, exit 1', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), { target: gateway.target, ca: await createTestCa() });
  await chmod(state.dir, 0o755);
  await chmod(state.store.path('identity.json'), 0o644);
  await saveCredentials(state.store, { current: newCredential(-1000) });
  const before = await snapshot(state.dir);
  const result = await run(['doctor', '--state-dir', state.dir]);
  t.equal(result.code, 1);
  t.match(result.stdout, /FAIL\s+state dir .* \(mode 0755\)\n\s+only the node's user may access it: chmod 700/);
  t.match(result.stdout, /FAIL\s+file .*identity\.json \(mode 0644\)\n\s+.*chmod 600/);
  t.match(result.stdout, /FAIL\s+credential expired at .*\n\s+re-enroll/);
  t.match(result.stdout, /FAIL\s+gateway TLS certificate trusted .*\n\s+the gateway's certificate is not trusted/);
  t.match(result.stdout, /4 checks failed/);
  t.same(await snapshot(state.dir), before, 'doctor fixed nothing by itself');
});

t.test('doctor names a gateway certificate without the saved name, and a gateway that is down', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway, { serverName: 'gw.elsewhere.example' });
  await chmod(state.dir, 0o700);
  const mismatch = await run(['doctor', '--state-dir', state.dir]);
  t.equal(mismatch.code, 1);
  t.match(mismatch.stdout, /host name mismatch: the gateway's certificate is not valid for "gw\.elsewhere\.example"/);
  gateway.stop();
  const down = await run(['doctor', '--state-dir', state.dir]);
  t.equal(down.code, 1);
  t.match(down.stdout, /FAIL\s+gateway 127\.0\.0\.1:\d+ reachable over TCP\n\s+the gateway at .* refused the connection/);
});

t.test('doctor on a missing state dir fails without creating it; every command has --help', async (t) => {
  const dir = t.testdir({});
  const result = await run(['doctor', '--state-dir', path.join(dir, 'nope')]);
  t.equal(result.code, 1);
  t.match(result.stdout, /FAIL\s+state dir .*nope/);
  t.same(await readdir(dir), []);
  for (const command of ['serve', 'enroll', 'status', 'doctor']) {
    const help = await run([command, '--help']);
    t.equal(help.code, 0, `${command} --help`);
    t.match(help.stdout, `Usage: zenova-node ${command}`);
  }
});
