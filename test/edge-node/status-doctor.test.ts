// `zenova-node status` and `zenova-node doctor` read the state dir (and, for doctor, probe the
// gateway over real TLS) without changing anything.
import { spawn, spawnSync } from 'node:child_process';
import { chmod, chown, readFile, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import type { Test } from 'tap';
import { runNodeCli as run, runNodeCliAsAnotherUser } from './cli-capture.js';
import { APPLIED_VERSION_FILE, AppliedVersionMark } from '../../edge-node/src/config/applied-version.js';
import { BundleCache } from '../../edge-node/src/config/bundle-cache.js';
import type { CachedBundle } from '../../edge-node/src/config/bundle-cache.js';
import { loadControlStatus, saveControlStatus } from '../../edge-node/src/control/control-status.js';
import { saveCredentials } from '../../edge-node/src/state/credential-store.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { openNodeSpool } from '../../edge-node/src/spool/open-node-spool.js';
import { createTestCa } from '../fixtures/tls.js';
import { bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';
import { newCredential, startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import type { EnrolledState } from './control-fixtures.js';

/** Names, modes and contents of everything in the dir (config/ included), to prove a command changed nothing. */
async function snapshot(dir: string): Promise<string[]> {
  const names = (await readdir(dir)).sort();
  const rows = [`. ${((await stat(dir)).mode & 0o777).toString(8)}`];
  for (const name of names) {
    const file = path.join(dir, name);
    if ((await stat(file)).isDirectory()) rows.push(...(await snapshot(file)).map((row) => `${name}/${row}`));
    else rows.push(`${name} ${((await stat(file)).mode & 0o777).toString(8)} ${await readFile(file, 'utf8')}`);
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

/**
 * An enrolled state dir (0700, gateway up) whose node applied config version `applied` and whose
 * cache holds `current` and `previous` (signed with the key the identity pins).
 */
async function withConfig(t: Test, versions: { applied: number; current: number; previous?: number }) {
  const gateway = await startFakeGateway(t);
  const signer = createSigner();
  const state = await writeEnrolledState(t.testdir({}), gateway, { configSigningPublicKeyPem: signer.publicKeyPem });
  await chmod(state.dir, 0o700);
  const entry = (version: number): CachedBundle => {
    const push = signedPush(testBundle({ nodeId: state.identity.nodeId, version, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [bundleKey('k', newCallerKey().sha256)] }), signer);
    return { version, bundle: push.bundle.toString('utf8'), signature: push.signature.toString('base64') };
  };
  const cache = new BundleCache(state.dir);
  await cache.store(entry(versions.current), versions.previous !== undefined ? entry(versions.previous) : undefined);
  await (await AppliedVersionMark.open(state.store)).record(versions.applied, { nodeId: state.identity.nodeId, publicKeyPem: signer.publicKeyPem }, new Date());
  return { state, cache, markFile: state.store.path(APPLIED_VERSION_FILE) };
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

t.test('status of a reconnected node shows the outage as a resolved past error without its advice', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const at = new Date(Date.now() - 60_000).toISOString();
  const resolvedAt = new Date().toISOString();
  await saveControlStatus(state.store, {
    connected: true,
    since: resolvedAt,
    lastError: { code: 'UNAVAILABLE', message: 'connection refused', at, advice: 'check the gateway is up', resolvedAt },
    sessionId: 'session-2',
    pid: process.pid,
    serving: true,
    updatedAt: resolvedAt,
  });
  const text = await run(['status', '--state-dir', state.dir]);
  t.match(text.stdout, /control link:\s+connected since/);
  t.match(text.stdout, `past error:    UNAVAILABLE at ${at} (resolved at ${resolvedAt}): connection refused`);
  t.notMatch(text.stdout, /last error:/, 'not shown as a current problem');
  t.notMatch(text.stdout, /what to do:/, 'no advice for a problem that is over');
  const json = JSON.parse((await run(['status', '--state-dir', state.dir, '--json'])).stdout);
  t.match(json.control, { connected: true, lastError: { code: 'UNAVAILABLE', at, resolvedAt } });

  // A file that says connected but not when the error was resolved: still no advice while connected.
  const record = await loadControlStatus(state.store);
  await saveControlStatus(state.store, { ...record!, lastError: { code: 'UNAVAILABLE', message: 'connection refused', at, advice: 'check the gateway is up' } });
  const unmarked = await run(['status', '--state-dir', state.dir]);
  t.match(unmarked.stdout, `past error:    UNAVAILABLE at ${at} (resolved): connection refused`);
  t.notMatch(unmarked.stdout, /what to do:/);
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

t.test('a damaged control-status.json leaves the node enrolled, its link unknown with the reason, and the rest of the report shown', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const file = state.store.path('control-status.json');
  for (const [damage, problem] of [
    ['{"connected": tr', /control-status\.json: is not valid JSON/],
    ['{"connected": "yes"}', /control-status\.json: .*connected/],
  ] as const) {
    await writeFile(file, damage, { mode: 0o600 });
    const text = await run(['status', '--state-dir', state.dir]);
    t.equal(text.code, 0, 'enrolled: exit 0, as with an unreadable spool or a link that is down');
    t.match(text.stdout, `edge-test (id ${state.identity.nodeId})`);
    t.match(text.stdout, /credential:\s+valid until/);
    t.match(text.stdout, /control link:\s+UNKNOWN: /);
    t.match(text.stdout, problem);
    t.notMatch(text.stdout, /node-edge:/, 'whether node-edge runs is not guessed');
    const json = await run(['status', '--state-dir', state.dir, '--json']);
    t.equal(json.code, 0);
    const report = JSON.parse(json.stdout);
    t.match(report, {
      enrolled: true,
      node: { id: state.identity.nodeId },
      credential: { expiresAt: state.credentials.current.expiresAt },
      control: { running: null, connected: null, lastError: null, error: problem },
      config: null,
    });
  }
});

t.test('a damaged credential.json or identity.json makes the node not enrolled, exit 1, naming the file and how to re-enroll', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  await writeFile(state.store.path('credential.json'), '{"current": ', { mode: 0o600 });
  const json = await run(['status', '--state-dir', state.dir, '--json']);
  t.equal(json.code, 1);
  t.match(JSON.parse(json.stdout), { enrolled: false, error: /credential\.json: is not valid JSON/, advice: /reenroll-command NAME/ });
  await writeFile(state.store.path('identity.json'), '{"nodeId": ', { mode: 0o600 });
  const text = await run(['status', '--state-dir', state.dir]);
  t.equal(text.code, 1);
  t.match(text.stderr, /identity\.json: is not valid JSON\nwhat to do: re-enroll: on the control plane run `zenova gateway-node reenroll-command NAME`/, 'says what to do');
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
  // A mark of an earlier enrollment (another node id): its mode is checked, but it sets no floor.
  await (await AppliedVersionMark.open(state.store)).record(1, { nodeId: 'enrolled-before', publicKeyPem: state.identity.configSigningPublicKeyPem }, new Date());
  await chmod(state.store.path(APPLIED_VERSION_FILE), 0o644);
  await saveCredentials(state.store, { current: newCredential(-1000) });
  const before = await snapshot(state.dir);
  const result = await run(['doctor', '--state-dir', state.dir]);
  t.equal(result.code, 1);
  t.match(result.stdout, /FAIL\s+state dir .* \(mode 0755\)\n\s+only the node's user may access it: chmod 700/);
  t.match(result.stdout, /FAIL\s+file .*identity\.json \(mode 0644\)\n\s+.*chmod 600/);
  t.match(result.stdout, /FAIL\s+file .*config-applied-version\.json \(mode 0644\)\n\s+.*chmod 600/);
  t.match(result.stdout, /FAIL\s+credential expired at .*\n\s+re-enroll/);
  t.match(result.stdout, /FAIL\s+gateway TLS certificate trusted .*\n\s+the gateway's certificate is not trusted/);
  t.match(result.stdout, /5 checks failed/);
  t.same(await snapshot(state.dir), before, 'doctor fixed nothing by itself');
});

t.test('doctor checks the config cache as serve loads it and passes one at the applied version', async (t) => {
  const { state, markFile } = await withConfig(t, { applied: 3, current: 3, previous: 2 });
  const before = await snapshot(state.dir);
  const result = await run(['doctor', '--state-dir', state.dir]);
  t.equal(result.code, 0, result.stdout);
  t.match(result.stdout, `ok    file ${markFile} (mode 0600)`);
  t.match(result.stdout, /ok\s+config cache: version 3 in .*current\.json verifies \(this node applied up to version 3\)/);
  t.same(await snapshot(state.dir), before, 'doctor raised or rewrote nothing');
});

t.test('doctor fails a damaged config-applied-version.json with the advice serve stops with', async (t) => {
  const { state, markFile } = await withConfig(t, { applied: 2, current: 2 });
  await writeFile(markFile, '{"version": 2, "nodeId"');
  const serve = await run(['serve', '--state-dir', state.dir, '--listen', '127.0.0.1:0']);
  t.equal(serve.code, 2, 'serve refuses to start');
  const refusal = serve.stderr.replace(/^zenova-node: /, '').trim();
  t.match(refusal, /config-applied-version\.json: is not valid JSON \(.*stop the node and delete it/);

  const result = await run(['doctor', '--state-dir', state.dir]);
  t.equal(result.code, 1, result.stdout);
  t.match(result.stdout, `FAIL  applied config version ${markFile}\n      \`serve\` refuses to start: ${refusal}\n`);
  t.notMatch(result.stdout, /all checks passed/);
});

t.test('doctor fails a rolled-back config cache that serve would not serve, with its code and advice', async (t) => {
  // A restored backup: the node applied version 3, the cache holds 2 (and 1 before it).
  const { state, cache } = await withConfig(t, { applied: 3, current: 2, previous: 1 });
  const result = await run(['doctor', '--state-dir', state.dir]);
  t.equal(result.code, 1, result.stdout);
  t.match(result.stdout, `FAIL  config cache ${cache.file('current')} verifies\n      CONFIG_ROLLED_BACK: it holds version 2, but this node already applied version 3`);
  t.match(result.stdout, /delete config-applied-version\.json/);
  t.notMatch(result.stdout, /ok\s+config cache: version/, 'no version is said to be served');
});

t.test('doctor fails an older previous.json served because current.json is damaged', async (t) => {
  const { state, cache } = await withConfig(t, { applied: 3, current: 3, previous: 2 });
  await writeFile(cache.file('current'), '{"version": 3');
  const result = await run(['doctor', '--state-dir', state.dir]);
  t.equal(result.code, 1, result.stdout);
  t.match(result.stdout, /FAIL\s+config cache .*current\.json verifies\n\s+CONFIG_CACHE_CORRUPT/);
  t.match(
    result.stdout,
    /FAIL\s+config cache: version 2 in .*previous\.json verifies but is OLDER than version 3 this node applied\n\s+serving config version 2 from config\/previous\.json because config\/current\.json is damaged/,
  );
  t.match(result.stdout, /2 checks failed/);
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

t.test('doctor on a state dir never enrolled says so once, with how to enroll, not to re-enroll', async (t) => {
  const dir = t.testdir({ empty: {} });
  await chmod(path.join(dir, 'empty'), 0o700);
  const result = await run(['doctor', '--state-dir', path.join(dir, 'empty')]);
  t.equal(result.code, 1);
  const fails = result.stdout.split('\n').filter((line) => line.startsWith('FAIL'));
  t.equal(fails.length, 1, `one finding (${fails.join(' | ')})`);
  t.match(fails[0], /is not enrolled/);
  t.match(result.stdout, /zenova-node enroll --control-plane URL --token-file FILE --state-dir/);
  t.notMatch(result.stdout, /--reenroll/, 'nothing to re-enroll');
  t.notMatch(result.stdout, /control plane accepts this node/, 'no claim about a control plane never reached');
});

t.test('doctor of an enrolled node whose node-edge never ran says no answer is recorded yet, not that the control plane accepts it', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const result = await run(['doctor', '--state-dir', state.dir]);
  t.match(result.stdout, /ok\s+control plane: no answer recorded yet/);
});

t.test('doctor fails, with status\'s advice, when the control plane refused the node (credential revoked), though the credential and TLS look fine', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  await chmod(state.dir, 0o700);
  const advice = 'this node was re-enrolled elsewhere: run `zenova gateway-node reenroll-command NAME` on the control plane';
  await saveControlStatus(state.store, {
    connected: false,
    since: new Date().toISOString(),
    lastError: { code: 'CREDENTIAL_REVOKED', message: 'revoked', at: new Date().toISOString(), advice },
    sessionId: null,
    pid: process.pid,
    serving: true,
    updatedAt: new Date().toISOString(),
  });
  const result = await run(['doctor', '--state-dir', state.dir]);
  t.equal(result.code, 1, result.stdout);
  t.match(result.stdout, /ok\s+credential valid until/);
  t.match(result.stdout, /FAIL\s+control plane accepts this node .*: refused with CREDENTIAL_REVOKED at .*\n\s+this node was re-enrolled elsewhere: run `zenova gateway-node reenroll-command NAME`/);
  t.notMatch(result.stdout, /all checks passed/);

  // Once a session was established again, the refusal is history.
  const control = await loadControlStatus(state.store);
  await saveControlStatus(state.store, { ...control!, lastError: { ...control!.lastError!, resolvedAt: new Date().toISOString() } });
  const after = await run(['doctor', '--state-dir', state.dir]);
  t.equal(after.code, 0, after.stdout);
  t.match(after.stdout, /ok\s+control plane accepts this node/);
});

t.test('status advises that the node reconnects by itself only while node-edge runs', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const unreachable = async (pid: number, serving: boolean) =>
    saveControlStatus(state.store, {
      connected: false,
      since: new Date().toISOString(),
      lastError: { code: 'GATEWAY_UNREACHABLE', message: 'connect ECONNREFUSED', at: new Date().toISOString(), advice: 'the gateway cannot be reached; the node keeps serving and reconnects by itself' },
      sessionId: null,
      pid,
      serving,
      updatedAt: new Date().toISOString(),
    });
  await unreachable(process.pid, true);
  t.match((await run(['status', '--state-dir', state.dir])).stdout, /what to do:\s+the gateway cannot be reached; the node keeps serving and reconnects by itself/);
  await unreachable(process.pid, false);
  const stopped = (await run(['status', '--state-dir', state.dir])).stdout;
  t.match(stopped, /node-edge:\s+not running/);
  t.notMatch(stopped, /keeps serving and reconnects by itself/);
  t.match(stopped, /what to do:\s+node-edge is not running: start it/);
});

t.test('status warns and doctor fails once the credential has less validity left than rotation allows', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  await chmod(state.dir, 0o700);
  // Held for 30 days with 36 h left: rotation (at half its life at the latest) never came.
  await saveCredentials(state.store, { current: newCredential(36 * 3600_000) });
  const heldSince = new Date(Date.now() - 30 * 24 * 3600_000);
  await utimes(state.store.path('credential.json'), heldSince, heldSince);
  const status = await run(['status', '--state-dir', state.dir]);
  t.match(status.stdout, /credential:\s+EXPIRES SOON: valid until .* \(1d 11h left\); it should have been rotated by now: .*check the link/);
  const json = JSON.parse((await run(['status', '--state-dir', state.dir, '--json'])).stdout);
  t.match(json.credential, { expired: false, expiresSoon: true });
  const doctor = await run(['doctor', '--state-dir', state.dir]);
  t.equal(doctor.code, 1, doctor.stdout);
  t.match(doctor.stdout, /FAIL\s+credential valid until .*, less than rotation leaves\n\s+it should have been rotated by now/);

  await saveCredentials(state.store, { current: newCredential(20 * 24 * 3600_000) });
  t.match((await run(['status', '--state-dir', state.dir])).stdout, /credential:\s+valid until /);
  t.equal((await run(['doctor', '--state-dir', state.dir])).code, 0);
});

t.test('a credential of a control plane with short validities, just rotated in, is no warning', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  await chmod(state.dir, 0o700);
  // A 12-hour validity: the whole life is under any fixed floor of days.
  await saveCredentials(state.store, { current: newCredential(12 * 3600_000) });
  t.match((await run(['status', '--state-dir', state.dir])).stdout, /credential:\s+valid until /);
  const doctor = await run(['doctor', '--state-dir', state.dir]);
  t.notMatch(doctor.stdout, /less than rotation leaves/);
  // Held 30 hours with 12 left: past 60 % of its life, so its rotation failed.
  const heldSince = new Date(Date.now() - 30 * 3600_000);
  await utimes(state.store.path('credential.json'), heldSince, heldSince);
  t.match((await run(['status', '--state-dir', state.dir])).stdout, /EXPIRES SOON/);
});

t.test('doctor run as another user than the node\'s says permission denied and to run it as that user or with sudo, never to re-enroll a healthy node', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  await chmod(state.dir, 0o700);
  const result = await runNodeCliAsAnotherUser(t, state.dir, 0o000, ['doctor', '--state-dir', state.dir]);
  t.equal(result.code, 1);
  t.match(result.stdout, /FAIL\s+state dir .*\n\s+.*permission denied: only the node's user \(and root\) may read the state dir; run this as that user or with sudo/);
  t.notMatch(result.stdout, /zenova-node enroll|--reenroll|reenroll-command/, 'no advice to enroll or re-enroll');
  t.match(result.stdout, /^1 check failed/m, 'one line, not every file failing');
  const healthy = await run(['doctor', '--state-dir', state.dir]);
  t.notMatch(healthy.stdout, /FAIL\s+(state dir|identity|credential)/, 'as the node\'s user the same dir passes');
});

t.test('doctor fails a spool serve would refuse (spool.db gone while spool.json names it, garbage in spool.db or spool.json) with serve\'s message, and passes a good one', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  await chmod(state.dir, 0o700);
  const doctor = async (): Promise<string> => (await run(['doctor', '--state-dir', state.dir])).stdout;
  t.match(await doctor(), /ok\s+request spool: none yet/);
  const spool = await openNodeSpool({ stateDir: state.dir, nodeId: state.identity.nodeId, holder: ConfigHolder.notReady('test'), logger: createLogger({ level: 'silent' }), synchronous: 'normal', replicas: 1 });
  t.match(await doctor(), /ok\s+request spool .*spool\.db \(open in the running node-edge\)/, 'held open by a node-edge: not read');
  await spool.close();
  const good = await doctor();
  t.match(good, /ok\s+request spool .*spool\.db: spool [0-9a-f-]+, readable/);
  const db = path.join(state.dir, 'spool.db');
  const marker = path.join(state.dir, 'spool.json');
  const kept = await readFile(db);
  await writeFile(db, 'garbage, not SQLite'.repeat(10));
  t.match(await doctor(), /FAIL\s+request spool .*spool\.db\n\s+`serve` refuses to start with it: .*is not a SQLite database/);
  await rm(db);
  t.match(await doctor(), /FAIL\s+request spool .*spool\.db\n\s+`serve` refuses to start with it: .*is missing, but .*spool\.json says spool/);
  await writeFile(db, kept);
  const markerText = await readFile(marker, 'utf8');
  await writeFile(marker, '{"spoolId": ');
  t.match(await doctor(), /FAIL\s+request spool marker\n\s+`serve` refuses to start with it: .*spool\.json: is not valid JSON; restore it, or move it aside \(never spool\.db\)/);
  await writeFile(marker, markerText);
  t.match(await doctor(), /ok\s+request spool .*readable/, 'restored: passes again');
});

t.test('a state file another user owns (written by a command run with sudo) is named with its owner and how to give it back, not as the whole dir being off limits', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const identity = path.join(state.dir, 'identity.json');
  if (process.getuid?.() !== 0) {
    // Not root: this user's own file, with a mode that forbids reading it.
    await chmod(identity, 0o000);
    t.teardown(() => chmod(identity, 0o600));
    const result = await run(['status', '--state-dir', state.dir]);
    t.match(result.stdout + result.stderr, `${identity}: permission denied: its mode 000 does not let its owner read it: chmod 600 ${identity}`);
    return;
  }
  // The dir and the other files are nobody's (the node's user here); identity.json stays root's.
  for (const name of await readdir(state.dir)) if (name !== 'identity.json') await chown(path.join(state.dir, name), 65534, 65534);
  await chown(state.dir, 65534, 65534);
  const child = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('../../edge-node/src/main.ts', import.meta.url)), 'status', '--state-dir', state.dir], { uid: 65534, gid: 65534, encoding: 'utf8', env: { ...process.env, HOME: '/tmp' } });
  t.match(child.stdout + child.stderr, `${identity}: permission denied: it belongs to uid 0, and this runs as uid 65534: run this as the node's user or with sudo; if this user is the node's (a command run with sudo wrote the file), give it back: chown 65534 ${identity}`);
});
