// The real `zenova-node serve --state-dir` process taking signed bundles from a scriptable TLS
// gateway: applied, cached and acknowledged; bad ones refused with their code while the last good
// one keeps serving; a burst ends on the latest; a restart without the control plane serves from
// the cache at once; a tampered cache falls back to previous or leaves the node not ready.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { canonicalJson } from '../../proto/src/index.js';
import type { ConfigBundle, NodeMessage } from '../../proto/src/index.js';
import { runCli } from '../../edge-node/src/cli/run-cli.js';
import { BundleCache } from '../../edge-node/src/config/bundle-cache.js';
import type { NodeStatusReport } from '../../edge-node/src/status/node-status.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { parseJsonLines } from '../fixtures/processes.js';
import type { StartedProcess } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { UPSTREAM_SECRET, bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';
import type { TestSigner } from './config-fixtures.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import { chatStatus as chat, serveNode } from './served-node.js';
import type { EnrolledState, FakeGateway, FakeSession } from './control-fixtures.js';

const MAIN = 'edge-node/src/main.ts';

async function runCliCaptured(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(argv, { stdout: { write: (s: string) => (stdout += s) }, stderr: { write: (s: string) => (stderr += s) } });
  return { code, stdout, stderr };
}

async function statusJson(stateDir: string): Promise<NodeStatusReport> {
  return JSON.parse((await runCliCaptured(['status', '--state-dir', stateDir, '--json'])).stdout) as NodeStatusReport;
}

async function readyz(url: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${url}/readyz`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

function logLines(proc: StartedProcess): Array<Record<string, unknown>> {
  return parseJsonLines(proc.output());
}

function waitForLog(proc: StartedProcess, pick: (line: Record<string, unknown>) => boolean, what: string): Promise<Record<string, unknown>> {
  return waitFor(() => logLines(proc).find(pick), { what, timeoutMs: 20_000 });
}

function helloOf(session: FakeSession): Promise<NodeMessage> {
  return waitFor(() => session.received.find((m) => m.hello !== undefined), { what: 'the hello', timeoutMs: 20_000 });
}

interface Scene {
  signer: TestSigner;
  state: EnrolledState;
  bundle: (version: number, keys: ConfigBundle['apiKeys'], nodeId?: string) => ConfigBundle;
}

async function scene(t: Test, gateway: FakeGateway, upstreamUrl: string): Promise<Scene> {
  const signer = createSigner();
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway, { configSigningPublicKeyPem: signer.publicKeyPem });
  return {
    signer,
    state,
    bundle: (version, keys, nodeId = state.identity.nodeId) => testBundle({ nodeId, version, upstreamUrl, keys }),
  };
}

t.test('an enrolled node applies, caches and acknowledges pushed bundles, refuses bad ones, and serves from its cache when restarted without the control plane', async (t) => {
  // Processes outlive the subtest that starts them; they belong to this test.
  const owner = t;
  const upstream = await startFakeUpstream(t);
  // The gateway's welcome is scripted per phase of the test.
  const hooks: { welcome?: (session: FakeSession) => void } = {};
  const gateway = await startFakeGateway(t, { heartbeatIntervalMs: 100, onWelcome: (session) => hooks.welcome?.(session) });
  const { signer, state, bundle } = await scene(t, gateway, upstream.url);
  const cache = new BundleCache(state.dir);

  let node = await serveNode(t, state.dir);
  const outputs = [node.proc];
  t.match(node.listening, { ready: false, configVersion: null }, 'a fresh node listens at once, not ready');
  t.match(await chat(node.url, newCallerKey().secret), { status: 503, code: 'ZN_ERR_NODE_NOT_READY' });
  const session = await gateway.waitForSession(0);
  t.equal((await helloOf(session)).hello?.appliedConfigVersion, 0n, 'the hello says it has no config');

  t.test('a good bundle is applied, cached at 0600 and acknowledged, and a key in it authenticates a real request', async (t) => {
    const key = newCallerKey();
    session.send({ configPush: signedPush(bundle(1, [bundleKey('k1', key.sha256)]), signer) });
    t.match(await gateway.waitForConfigAck(session, 1), { version: 1n, ok: true, error: undefined });
    await waitForLog(node.proc, (l) => l.msg === 'config applied' && l.version === 1, 'the "config applied" line');
    t.equal((await stat(cache.file('current'))).mode & 0o777, 0o600, 'current.json is 0600');
    t.match(await chat(node.url, key.secret), { status: 200 });
    t.equal(upstream.requests.at(-1)?.headers.authorization, `Bearer ${UPSTREAM_SECRET}`);
    t.match(await readyz(node.url), { status: 200, body: { ready: true, configVersion: 1, configAppliedAt: /^\d{4}-/, controlPlane: { connected: true, disconnectedSince: null } } });
    await gateway.waitForMessage(session, (m) => m.heartbeat?.appliedConfigVersion === 1n && m.heartbeat.ready, 'a heartbeat reporting version 1, ready');
    const status = await waitFor(async () => {
      const report = await statusJson(state.dir);
      return report.config?.version === 1 ? report : undefined;
    }, { what: 'status to show version 1' });
    t.match(status.config, { ready: true, version: 1, appliedAt: /^\d{4}-/ });
  });

  const servingKey = newCallerKey();
  t.test('bundles with a bad signature, an older version, a schema error or another node id are refused with their code while the last good one serves', async (t) => {
    session.send({ configPush: signedPush(bundle(3, [bundleKey('k3', servingKey.sha256)]), signer) });
    t.match(await gateway.waitForConfigAck(session, 3), { ok: true });
    const cases: Array<[string, ReturnType<typeof signedPush>, string]> = [
      ['a bad signature', signedPush(bundle(4, []), createSigner()), 'CONFIG_BAD_SIGNATURE'],
      ['an older version', signedPush(bundle(2, []), signer), 'CONFIG_VERSION_OLDER'],
      ['a schema error', signedPush({ ...bundle(5, []), schemaVersion: 2 }, signer), 'CONFIG_SCHEMA'],
      ['another node id', signedPush(bundle(6, [], 'some-other-node'), signer), 'CONFIG_WRONG_NODE'],
    ];
    for (const [what, push, code] of cases) {
      session.send({ configPush: push });
      const ack = await gateway.waitForConfigAck(session, Number(push.version));
      t.match(ack, { ok: false, error: { code, message: /\w/, retryable: false } }, `${what}: refused in the ack with ${code}`);
      await waitForLog(node.proc, (l) => l.msg === 'config refused' && l.code === code && l.version === Number(push.version), `the "config refused" line for ${what}`);
      t.match(await chat(node.url, servingKey.secret), { status: 200 }, `${what}: the node keeps serving version 3`);
    }
    t.match(await readyz(node.url), { status: 200, body: { configVersion: 3 } });
    t.equal((JSON.parse(await readFile(cache.file('current'), 'utf8')) as { version: number }).version, 3, 'the cache still holds version 3');
  });

  const latestKey = newCallerKey();
  t.test('a burst of 50 pushes ends on the latest', async (t) => {
    for (let version = 10; version < 60; version++) {
      const keys = [bundleKey('k3', servingKey.sha256), ...(version === 59 ? [bundleKey('k59', latestKey.sha256)] : [])];
      session.send({ configPush: signedPush(bundle(version, keys), signer) });
    }
    t.match(await gateway.waitForConfigAck(session, 59), { ok: true });
    const acks = session.received.filter((m) => m.configAck !== undefined && m.configAck.version >= 10n);
    t.ok(acks.every((m) => m.configAck?.ok === true), 'every push of the burst was acknowledged ok');
    t.match(await readyz(node.url), { body: { configVersion: 59 } });
    t.match(await chat(node.url, latestKey.secret), { status: 200 }, 'a key only version 59 has works');
    await gateway.waitForMessage(session, (m) => m.heartbeat?.appliedConfigVersion === 59n, 'a heartbeat reporting version 59');
  });

  t.test('restarted with the gateway unreachable, the node serves from its cache at once and says since when it is disconnected', async (t) => {
    t.equal(await node.proc.stop('SIGTERM'), 0);
    gateway.stop();
    node = await serveNode(owner, state.dir);
    outputs.push(node.proc);
    t.match(node.listening, { ready: true, configVersion: 59 }, 'ready as it starts listening');
    t.match(logLines(node.proc).find((l) => l.msg === 'config loaded from cache'), { version: 59, file: cache.file('current') });
    t.match(await chat(node.url, latestKey.secret), { status: 200 }, 'a cached key authenticates');
    t.notOk(logLines(node.proc).some((l) => l.msg === 'control session established'), 'without any contact with the control plane');
    const ready = await readyz(node.url);
    t.match(ready, { status: 200, body: { ready: true, configVersion: 59, controlPlane: { connected: false, disconnectedSince: /^\d{4}-/ } } });

    const report = await waitFor(async () => {
      const r = await statusJson(state.dir);
      return r.control.running && r.config?.version === 59 ? r : undefined;
    }, { what: 'status of the restarted node' });
    t.match(report.control, { connected: false, disconnectedSince: /^\d{4}-/ });
    const text = await runCliCaptured(['status', '--state-dir', state.dir]);
    t.match(text.stdout, /control link:\s+not connected since \S+ \(\d+[dhms]/);
    t.match(text.stdout, /config:\s+version 59, applied \d{4}-/);
  });

  t.test('config changed while the node was away is applied when the control plane returns', async (t) => {
    const returningKey = newCallerKey();
    hooks.welcome = (s) => {
      const hello = s.received.find((m) => m.hello !== undefined)?.hello;
      if ((hello?.appliedConfigVersion ?? 0n) < 60n) s.send({ configPush: signedPush(bundle(60, [bundleKey('k60', returningKey.sha256)]), signer) });
    };
    await gateway.restart();
    const back = await waitFor(() => gateway.sessions.find((s) => !s.ended && s.received.some((m) => m.hello?.appliedConfigVersion === 59n)), {
      what: 'a session whose hello says version 59',
      timeoutMs: 30_000,
    });
    t.match(await gateway.waitForConfigAck(back, 60), { ok: true });
    t.match(await chat(node.url, returningKey.secret), { status: 200 });
    t.match(await chat(node.url, latestKey.secret), { status: 401, code: 'ZN_ERR_API_KEY_INVALID' }, 'a key dropped by version 60 no longer works');
  });

  t.test('no secret reaches the logs', async (t) => {
    const all = outputs.map((proc) => proc.output()).join('\n');
    t.notOk(all.includes(UPSTREAM_SECRET), 'the upstream secret from the bundle');
    t.notOk(all.includes(latestKey.secret), 'a caller key');
    t.notOk(all.includes(state.credentials.current.secret), 'the node credential');
  });
});

t.test('a tampered current.json is refused with a log line naming the file, and previous is served', async (t) => {
  const upstream = await startFakeUpstream(t);
  const gateway = await startFakeGateway(t);
  const { signer, state, bundle } = await scene(t, gateway, upstream.url);
  const previousKey = newCallerKey();
  const currentKey = newCallerKey();
  const cache = new BundleCache(state.dir);
  const entryOf = (b: ConfigBundle) => {
    const push = signedPush(b, signer);
    return { version: b.version, bundle: push.bundle.toString('utf8'), signature: push.signature.toString('base64') };
  };
  await cache.store(entryOf(bundle(2, [bundleKey('k2', currentKey.sha256)])), entryOf(bundle(1, [bundleKey('k1', previousKey.sha256)])));
  // Someone adds their own key to the current bundle (still canonical JSON); its signature no longer matches.
  const attackerKey = newCallerKey();
  const current = JSON.parse(await readFile(cache.file('current'), 'utf8')) as { bundle: string };
  const forged = JSON.parse(current.bundle) as ConfigBundle;
  forged.apiKeys.push({ ...forged.apiKeys[0]!, id: 'attacker', sha256: attackerKey.sha256 });
  current.bundle = canonicalJson(forged);
  await writeFile(cache.file('current'), JSON.stringify(current));

  const node = await serveNode(t, state.dir);
  t.match(logLines(node.proc).find((l) => l.msg === 'config cache refused'), { file: cache.file('current'), code: 'CONFIG_BAD_SIGNATURE' });
  t.match(logLines(node.proc).find((l) => l.msg === 'config loaded from cache'), { version: 1, file: cache.file('previous') });
  t.match(node.listening, { ready: true, configVersion: 1 });
  t.match(await chat(node.url, previousKey.secret), { status: 200 }, 'the previous good config serves');
  t.match(await chat(node.url, currentKey.secret), { status: 401, code: 'ZN_ERR_API_KEY_INVALID' }, 'nothing from the refused file is used');
  t.match(await chat(node.url, attackerKey.secret), { status: 401, code: 'ZN_ERR_API_KEY_INVALID' }, 'least of all the forged key');
});

t.test('with both cache files tampered the node is not ready, answers 503 ZN_ERR_NODE_NOT_READY, and becomes ready with the next good push', async (t) => {
  const upstream = await startFakeUpstream(t);
  const gateway = await startFakeGateway(t, { heartbeatIntervalMs: 100 });
  const { signer, state, bundle } = await scene(t, gateway, upstream.url);
  const key = newCallerKey();
  const cache = new BundleCache(state.dir);
  const good = signedPush(bundle(2, [bundleKey('k', key.sha256)]), signer);
  const stranger = signedPush(bundle(1, [bundleKey('k', key.sha256)]), createSigner());
  // Both files hold bundles with the key, one with a broken signature and one signed by someone else.
  await cache.store(
    { version: 2, bundle: good.bundle.toString('utf8'), signature: Buffer.from(good.signature).reverse().toString('base64') },
    { version: 1, bundle: stranger.bundle.toString('utf8'), signature: stranger.signature.toString('base64') },
  );

  const node = await serveNode(t, state.dir);
  const refusals = logLines(node.proc).filter((l) => l.msg === 'config cache refused');
  t.match(refusals, [{ file: cache.file('current'), code: 'CONFIG_BAD_SIGNATURE' }, { file: cache.file('previous'), code: 'CONFIG_BAD_SIGNATURE' }]);
  t.match(node.listening, { ready: false });
  t.match(await chat(node.url, key.secret), { status: 503, code: 'ZN_ERR_NODE_NOT_READY' }, 'never serves an unverified config');
  const notReady = await readyz(node.url);
  t.match(notReady, { status: 503, body: { ready: false, code: 'ZN_ERR_NODE_NOT_READY', reason: /config\/current\.json: CONFIG_BAD_SIGNATURE/ } });
  t.notMatch(String(notReady.body.reason), state.dir, 'the reason names no absolute path');
  const report = await waitFor(async () => {
    const r = await statusJson(state.dir);
    return r.control.running && r.config !== null ? r : undefined;
  }, { what: 'status of the not-ready node' });
  t.match(report.config, { ready: false, version: null, notReadyReason: /refused/ });
  t.match((await runCliCaptured(['status', '--state-dir', state.dir])).stdout, /config:\s+NOT READY: the cached config was refused/);

  const session = await gateway.waitForSession(0);
  t.equal((await helloOf(session)).hello?.appliedConfigVersion, 0n);
  session.send({ configPush: signedPush(bundle(3, [bundleKey('k', key.sha256)]), signer) });
  t.match(await gateway.waitForConfigAck(session, 3), { ok: true });
  t.match(await chat(node.url, key.secret), { status: 200 });
  t.match(await readyz(node.url), { status: 200, body: { ready: true, configVersion: 3 } });
});

t.test('serve with a ZENOVA_NODE_REPLICAS it cannot honour is a usage error that says why, not a stack trace', async (t) => {
  const dir = t.testdir({});
  const file = path.join(dir, 'node.json');
  writeFileSync(file, JSON.stringify({
    node: { name: 'edge-1' },
    upstreams: [{ name: 'u', kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1' }],
    models: [{ id: 'm', upstream: 'u', upstreamModel: 'm' }],
    apiKeys: [{ id: 'k1', sha256: 'a'.repeat(64) }],
  }));
  const before = process.env.ZENOVA_NODE_REPLICAS;
  t.teardown(() => {
    if (before === undefined) delete process.env.ZENOVA_NODE_REPLICAS;
    else process.env.ZENOVA_NODE_REPLICAS = before;
  });
  for (const [value, expected] of [['2', /ZENOVA_NODE_REPLICAS=2 needs a state dir/], ['two', /ZENOVA_NODE_REPLICAS must be a whole number/]] as const) {
    process.env.ZENOVA_NODE_REPLICAS = value;
    const { code, stderr } = await runCliCaptured(['serve', '--config', file, '--listen', '127.0.0.1:0']);
    t.equal(code, 2, value);
    t.match(stderr, expected);
    t.notMatch(stderr, /\n\s+at /, 'no stack trace');
    // As a process: its log (stdout) must not hold an error line with a stack before the refusal.
    const child = spawnSync(process.execPath, ['--import', 'tsx', path.resolve(MAIN), 'serve', '--config', file, '--listen', '127.0.0.1:0'], {
      encoding: 'utf8',
      env: { ...process.env, ZENOVA_NODE_REPLICAS: value },
      timeout: 60_000,
    });
    t.equal(child.status, 2, `${value} as a process`);
    t.match(child.stderr, expected);
    t.equal(child.stdout, '', 'refused before anything starts: no log line (and no stack in one)');
  }
});

t.test('serve with both --config and --state-dir is a usage error that says why', async (t) => {
  const { code, stderr } = await runCliCaptured(['serve', '--state-dir', t.testdir({}), '--config', 'node.json']);
  t.equal(code, 2);
  t.match(stderr, /--config cannot be used with --state-dir: an enrolled node serves only the signed config its control plane pushes/);
});

t.test("a node whose credential the control plane refuses serves on from its cache, and /readyz says why its link is down and what to do", async (t) => {
  const upstream = await startFakeUpstream(t);
  const gateway = await startFakeGateway(t, {
    authorize: () => ({ code: 'CREDENTIAL_EXPIRED', message: 'credential expired at 2026-01-01T00:00:00Z; secret-looking detail', status: 16 }),
  });
  const { signer, state, bundle } = await scene(t, gateway, upstream.url);
  const key = newCallerKey();
  const push = signedPush(bundle(3, [bundleKey('k', key.sha256)]), signer);
  await new BundleCache(state.dir).store({ version: 3, bundle: push.bundle.toString('utf8'), signature: push.signature.toString('base64') }, undefined);

  const node = await serveNode(t, state.dir);
  t.match(await chat(node.url, key.secret), { status: 200 }, 'the cached config serves');
  const ready = await waitFor(async () => {
    const r = await readyz(node.url);
    return (r.body.controlPlane as { lastError?: unknown } | null)?.lastError !== undefined ? r : undefined;
  }, { what: '/readyz naming the refusal', timeoutMs: 20_000 });
  t.match(ready, { status: 200, body: { ready: true, configVersion: 3, controlPlane: { connected: false, lastError: { code: 'CREDENTIAL_EXPIRED', advice: /re-?enroll/i, at: /^\d{4}-/ } } } });
  t.notMatch(JSON.stringify(ready.body), /secret-looking detail/, "the control plane's message stays in `zenova-node status`, not on the callers' port");
});
