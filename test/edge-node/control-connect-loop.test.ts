// The connect loop's policy against a real TLS gateway: reconnect after the gateway comes back,
// fall back to the previous credential until it is refused, retry slowly after refusals that need an operator,
// and mirror the link into control-status.json.
import { writeFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { startConnectLoop } from '../../edge-node/src/control/connect-loop.js';
import type { ConnectLoop, ConnectLoopOptions } from '../../edge-node/src/control/connect-loop.js';
import { loadControlStatus, saveControlStatus } from '../../edge-node/src/control/control-status.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { loadCredentials, saveCredentials } from '../../edge-node/src/state/credential-store.js';
import { StateAccessDeniedError, openStateStore } from '../../edge-node/src/state/state-store.js';
import type { StateStore } from '../../edge-node/src/state/state-store.js';
import { waitFor } from '../fixtures/wait-for.js';
import { runNodeCli } from './cli-capture.js';
import { newCredential, startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import type { EnrolledState } from './control-fixtures.js';

type Line = Record<string, unknown>;


function startLoop(t: { teardown(fn: () => unknown): void }, state: EnrolledState, overrides: Partial<ConnectLoopOptions> = {}): { loop: ConnectLoop; lines: Line[] } {
  const lines: Line[] = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Line) } });
  const loop = startConnectLoop({
    store: state.store,
    logger,
    facts: { version: '0.1.0', hostname: 'h', arch: 'x64' },
    figures: () => ({ requests5m: 0, errors5m: 0, spoolBytes: 0, backfillBacklog: 0, appliedConfigVersion: 0, ready: true }),
    reconnect: { baseMs: 20, maxMs: 200 },
    refusedRetryMs: 60_000,
    ...overrides,
  });
  t.teardown(() => loop.stop());
  return { loop, lines };
}

t.test('the loop reconnects by itself after the gateway goes away and comes back, recording the gap', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const { loop, lines } = startLoop(t, state);

  const established = (): number => lines.filter((l) => l.msg === 'control session established').length;
  await waitFor(() => established() === 1, { what: 'first session' });
  // The line is logged only once the status file says so, so `status` never lags behind the log.
  t.match(await loadControlStatus(state.store), { connected: true, sessionId: 'session-0', serving: true, pid: process.pid });

  gateway.stop();
  await waitFor(() => lines.find((l) => l.msg === 'control session ended' && l.established === true), { what: 'the session end to be logged' });
  t.not(loop.status().state, 'connected');
  const file = await loadControlStatus(state.store);
  t.equal(file?.connected, false);
  t.equal(file?.sessionId, null);
  t.ok(file?.lastError !== null, 'the last error is recorded');

  await gateway.restart();
  await waitFor(() => established() === 2, { what: 'a new session after the restart' });
  t.equal(gateway.sessions.length >= 2, true);
  const back = await loadControlStatus(state.store);
  t.match(back, { connected: true, sessionId: `session-${gateway.sessions.length - 1}` });
  // The outage's error is kept as history, marked resolved when the link came back.
  t.match(back?.lastError, { code: /\w+/, resolvedAt: back?.since });
  t.ok(Date.parse(back?.lastError?.at ?? '') <= Date.parse(back?.since ?? ''), 'the error is from before the reconnect');
  t.equal(loop.status().lastError?.resolvedAt?.toISOString(), back?.since);
  const status = await runNodeCli(['status', '--state-dir', state.dir]);
  t.match(status.stdout, /past error:\s+\S+ at .* \(resolved at /);
  t.notMatch(status.stdout, /what to do:/, 'no advice for an outage that is over');

  await loop.stop();
  t.match(await loadControlStatus(state.store), { connected: false, serving: false }, 'a clean stop is recorded');
});

t.test('when the current credential is refused as invalid, the previous one is tried once', async (t) => {
  const previous = newCredential();
  const current = newCredential();
  const gateway = await startFakeGateway(t, {
    authorize: (session) => (session.credential === current.secret ? { code: 'CREDENTIAL_INVALID', message: 'unknown credential' } : undefined),
  });
  const state = await writeEnrolledState(t.testdir({}), gateway, { credentials: { current, previous } });
  const { loop, lines } = startLoop(t, state);
  await waitFor(() => loop.status().state === 'connected', { what: 'a session on the previous credential' });
  t.same(gateway.sessions.map((s) => s.credential === current.secret ? 'current' : s.credential === previous.secret ? 'previous' : '?'), ['current', 'previous']);
  t.match(lines.find((l) => l.msg === 'control session ended'), { code: 'CREDENTIAL_INVALID', next: 'retrying with the previous credential' });
  t.same(await loadCredentials(state.store), { current, previous }, 'the file is not changed by the fallback');
});

t.test('a network failure of the attempt with the previous credential does not spend the fallback: the next attempt tries it again soon', async (t) => {
  const previous = newCredential();
  const current = newCredential();
  const gateway = await startFakeGateway(t, {
    authorize: (session) => {
      if (session.credential === current.secret) return { code: 'CREDENTIAL_INVALID', message: 'unknown credential' };
      // The first attempt with the previous credential is cut by a flaky link; the next one is accepted.
      if (session.credential === previous.secret && session.index === 1) queueMicrotask(() => session.fail(grpc.status.UNAVAILABLE, 'connection reset'));
      return undefined;
    },
  });
  const state = await writeEnrolledState(t.testdir({}), gateway, { credentials: { current, previous } });
  // The slow retry is ten minutes: only a prompt retry with the previous credential connects within the deadline.
  const { loop, lines } = startLoop(t, state, { refusedRetryMs: 600_000 });
  await waitFor(() => loop.status().state === 'connected', { what: 'a session on the previous credential after the failed fallback' });
  t.same(gateway.sessions.map((s) => (s.credential === current.secret ? 'current' : s.credential === previous.secret ? 'previous' : '?')), ['current', 'previous', 'previous']);
  const ends = lines.filter((l) => l.msg === 'control session ended');
  t.match(ends[1], { reason: 'disconnected', next: 'retrying with the previous credential' });
  t.ok(typeof ends[1]?.retryInMs === 'number' && ends[1].retryInMs < 600_000, 'the normal back-off, not the slow retry');
});

t.test('a session on the previous credential that came up and was then ended by a refusal (the control plane restarting) does not spend the fallback', async (t) => {
  const previous = newCredential();
  const current = newCredential();
  const gateway = await startFakeGateway(t, {
    authorize: (session) => (session.credential === current.secret ? { code: 'CREDENTIAL_INVALID', message: 'unknown credential' } : undefined),
  });
  const state = await writeEnrolledState(t.testdir({}), gateway, { credentials: { current, previous } });
  // The slow retry is ten minutes: only a prompt fallback to the previous credential connects again within the deadline.
  const { loop } = startLoop(t, state, { refusedRetryMs: 600_000 });
  await waitFor(() => loop.status().state === 'connected', { what: 'a session on the previous credential' });
  // The control plane stops before it rotated the node's credential: the established session is refused.
  (await gateway.waitForSession(1)).refuse('SERVER_SHUTTING_DOWN', 'the control plane is stopping', grpc.status.UNAVAILABLE);
  await waitFor(() => gateway.sessions.length >= 4 && loop.status().state === 'connected', { what: 'a session on the previous credential again' });
  t.same(gateway.sessions.slice(0, 4).map((s) => (s.credential === current.secret ? 'current' : s.credential === previous.secret ? 'previous' : '?')), ['current', 'previous', 'current', 'previous']);
});

t.test('when the previous credential is refused too, the fallback is spent: only slow retries follow', async (t) => {
  const previous = newCredential();
  const current = newCredential();
  const gateway = await startFakeGateway(t, {
    authorize: (session) => ({ code: 'CREDENTIAL_INVALID', message: `unknown credential ${session.credential === previous.secret ? 'previous' : 'current'}` }),
  });
  const state = await writeEnrolledState(t.testdir({}), gateway, { credentials: { current, previous } });
  const { lines } = startLoop(t, state, { refusedRetryMs: 600_000 });
  await waitFor(() => lines.find((l) => l.msg === 'control session ended' && l.retryInMs === 600_000), { what: 'the slow retry' });
  t.equal(gateway.sessions.filter((s) => s.credential === previous.secret).length, 1, 'the previous credential is tried once');
  t.match(lines.findLast((l) => l.msg === 'control session ended'), { level: 50, code: 'CREDENTIAL_INVALID', retryInMs: 600_000 });
});

t.test('a refusal that needs an operator is one clear error line with advice, then only slow retries', async (t) => {
  const previous = newCredential();
  const gateway = await startFakeGateway(t, {
    authorize: () => ({ code: 'NODE_DELETED', message: 'node edge-test was deleted', status: grpc.status.UNAUTHENTICATED }),
  });
  const state = await writeEnrolledState(t.testdir({}), gateway, { credentials: { current: newCredential(), previous } });
  const { loop, lines } = startLoop(t, state, { refusedRetryMs: 60_000 });
  const ended = await waitFor(() => lines.find((l) => l.msg === 'control session ended'), { what: 'the refusal line' });
  t.match(ended, { level: 50, code: 'NODE_DELETED', retryInMs: 60_000, advice: /deleted in the control plane and cannot come back: its records not yet sent can no longer be delivered.*create a node .*reenroll-command NAME.*--reenroll.*moves the old node's spool and config aside.*retired\/.*never delete the node's directory/ });
  t.match(loop.status(), { state: 'disconnected', lastError: { code: 'NODE_DELETED' } });
  const file = await waitFor(async () => (await loadControlStatus(state.store))?.lastError?.code === 'NODE_DELETED' && loadControlStatus(state.store), {
    what: 'the refusal in control-status.json',
  });
  t.match(file, { connected: false, lastError: { code: 'NODE_DELETED', advice: /cannot come back/ } });
  t.equal(gateway.sessions.length, 1, 'NODE_DELETED does not fall back to the previous credential');
});

t.test('a session refused as expired after a rotation was saved reconnects soon with the successor, not after the slow retry', async (t) => {
  const next = newCredential();
  const gateway = await startFakeGateway(t, {
    onWelcome: (session) => {
      if (session.index !== 0) return;
      // The gateway ends a session on the credential it replaced (its ack never counted).
      session.send({ credentialRotation: { credentialId: next.id, credential: next.secret, expiresAt: BigInt(Date.parse(next.expiresAt)), previousValidUntil: 0n } });
      session.refuse('CREDENTIAL_EXPIRED', 'the credential expired');
    },
  });
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const { loop } = startLoop(t, state, { refusedRetryMs: 600_000 });
  // The slow retry is ten minutes: only the prompt one reaches a second session within the deadline.
  await waitFor(() => gateway.sessions.length >= 2 && loop.status().state === 'connected', { what: 'a second session soon after the refusal' });
  t.equal(gateway.sessions[0]?.credential, state.credentials.current.secret, 'the first session used the original credential');
  t.equal(gateway.sessions[1]?.credential, next.secret, 'the second uses the saved successor');
});

t.test('a session refused as expired with no rotation saved waits for the slow retry', async (t) => {
  const gateway = await startFakeGateway(t, {
    onWelcome: (session) => session.refuse('CREDENTIAL_EXPIRED', 'the credential expired'),
  });
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const { loop, lines } = startLoop(t, state, { refusedRetryMs: 600_000 });
  await waitFor(() => lines.find((l) => l.msg === 'control session ended'), { what: 'the refusal line' });
  t.match(lines.find((l) => l.msg === 'control session ended'), { code: 'CREDENTIAL_EXPIRED', retryInMs: 600_000 });
  t.equal(loop.status().state, 'disconnected');
});

t.test('a credential revoked by a re-enrollment still being written is taken as soon as credential.json holds the new one, not after the slow retry', async (t) => {
  const replacement = newCredential();
  const gateway = await startFakeGateway(t, {
    // `enroll --reenroll` revokes the old credential (ending its session) before the new one is on disk.
    authorize: (session) => (session.credential === replacement.secret ? undefined : { code: 'CREDENTIAL_REVOKED', message: 'the credential was revoked' }),
  });
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const { loop, lines } = startLoop(t, state, { refusedRetryMs: 600_000, credentialPollMs: 50 });
  await waitFor(() => lines.find((l) => l.msg === 'control session ended'), { what: 'the refusal' });
  t.match(lines.find((l) => l.msg === 'control session ended'), { code: 'CREDENTIAL_REVOKED', retryInMs: 600_000 });
  // The re-enrollment's answer arrives and is written.
  await saveCredentials(state.store, { current: replacement });
  // Ten minutes of slow retry: only the prompt attempt connects within the deadline.
  await waitFor(() => loop.status().state === 'connected', { what: 'a session on the new credential' });
  t.equal(gateway.sessions.at(-1)?.credential, replacement.secret);
  t.ok(lines.some((l) => typeof l.msg === 'string' && l.msg.startsWith('credential.json holds a new credential')), 'says why it connects again');
});

t.test('a node not enrolled yet connects as soon as it is, not after the slow retry', async (t) => {
  const gateway = await startFakeGateway(t);
  const dir = t.testdir({});
  const store = await openStateStore(dir, { create: true });
  const { loop, lines } = startLoop(t, { dir, store } as unknown as EnrolledState, { refusedRetryMs: 600_000, credentialPollMs: 50 });
  await waitFor(() => lines.find((l) => l.code === 'NOT_ENROLLED'), { what: 'the not-enrolled line' });
  await writeEnrolledState(dir, gateway);
  await waitFor(() => loop.status().state === 'connected', { what: 'a session once enrolled' });
  t.pass('connected');
});

t.test('a wall clock stepping back an hour during a reconnect back-off does not stretch the wait', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const { lines } = startLoop(t, state, { reconnect: { baseMs: 1_500, maxMs: 1_500 } });
  const established = (): number => lines.filter((l) => l.msg === 'control session established').length;
  await waitFor(() => established() === 1, { what: 'the first session' });
  gateway.stop();
  await waitFor(() => lines.some((l) => l.msg === 'control session ended'), { what: 'the session end' });
  // In the back-off now: NTP (or a resumed VM) steps the wall clock back one hour.
  const realNow = Date.now;
  Date.now = () => realNow() - 3_600_000;
  t.teardown(() => {
    Date.now = realNow;
  });
  await gateway.restart();
  await waitFor(() => established() === 2, { what: 'a session within the back-off, not an hour later', timeoutMs: 10_000 });
  t.pass('reconnected');
});

t.test('a link handed over to another process records why in control-status.json, unless the new holder already wrote it', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const handedOver = { code: 'CONTROL_LINK_HANDED_OVER', message: 'another node-edge process (pid 999999) holds the control link now; this one follows it' };

  const first = startLoop(t, state);
  await waitFor(() => first.loop.status().state === 'connected', { what: 'a session' });
  await first.loop.stop({ handedOver });
  t.match(await loadControlStatus(state.store), { connected: false, serving: true, pid: process.pid, lastError: handedOver }, 'the file says disconnected, and why');

  const second = startLoop(t, state);
  // Logged once the session's own write of control-status.json is done: the new holder writes after it.
  await waitFor(() => second.lines.some((l) => l.msg === 'control session established'), { what: 'a session, its status written' });
  // The new holder (another pid) wrote the file first: it is its link's status now.
  const holders = { connected: true, since: new Date().toISOString(), lastError: null, sessionId: 'theirs', pid: 999_999, serving: true, updatedAt: new Date().toISOString() };
  await saveControlStatus(state.store, holders);
  await second.loop.stop({ handedOver });
  t.same(await loadControlStatus(state.store), holders, "the new holder's status is left as it wrote it");
});

/** The state store of `state`, whose reads of credential.json are denied (as to a process of another user) while `denied()` says so. */
function credentialDeniedWhile(state: EnrolledState, denied: () => boolean): StateStore {
  return {
    ...state.store,
    read: async (name) => {
      if (name === 'credential.json' && denied()) throw new StateAccessDeniedError(state.store.path(name), { owner: { uid: 4242, mode: 0o100600 } });
      return state.store.read(name);
    },
  };
}

t.test('a state file the node may not read is reported as access denied with its fix, not as damage to re-enroll over, and retried sooner than a refusal', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const { loop, lines } = startLoop(t, { ...state, store: credentialDeniedWhile(state, () => true) }, { refusedRetryMs: 60_000 });
  const ended = await waitFor(() => lines.find((l) => l.msg === 'control session ended'), { what: 'the error line' });
  t.match(ended, { level: 50, code: 'STATE_ACCESS_DENIED', retryInMs: 30_000, message: /permission denied: it belongs to uid 4242.*chown/, advice: /may not read a file in its state directory.*no re-enrollment is needed/ });
  t.notMatch(String(ended.advice), /--reenroll/);
  const file = await waitFor(async () => (await loadControlStatus(state.store))?.lastError?.code === 'STATE_ACCESS_DENIED' && loadControlStatus(state.store), {
    what: 'the error in control-status.json',
  });
  t.match(file, { connected: false, lastError: { code: 'STATE_ACCESS_DENIED', advice: /chown or chmod/ } });
  t.equal(gateway.sessions.length, 0, 'no session without a credential');
  t.not(loop.status().state, 'connected');
});

t.test('once the file can be read again, the node connects by itself without a restart', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  let denied = true;
  const { loop, lines } = startLoop(t, { ...state, store: credentialDeniedWhile(state, () => denied) }, { refusedRetryMs: 50 });
  await waitFor(() => lines.find((l) => l.code === 'STATE_ACCESS_DENIED'), { what: 'the access-denied line' });
  denied = false;
  await waitFor(() => loop.status().state === 'connected', { what: 'a session once the credential is readable' });
  t.match(loop.status().lastError, { code: 'STATE_ACCESS_DENIED', resolvedAt: Date });
});

t.test('a damaged state file is still reported as such, with doctor and re-enrollment as its advice', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  writeFileSync(state.store.path('credential.json'), '{ not json');
  const { lines } = startLoop(t, state, { refusedRetryMs: 60_000 });
  const ended = await waitFor(() => lines.find((l) => l.msg === 'control session ended'), { what: 'the error line' });
  t.match(ended, { code: 'STATE_INVALID', retryInMs: 60_000, message: /credential\.json.*not valid JSON/, advice: /doctor.*--reenroll/ });
});
