// When the connect loop tells its channels the node is cut off (the credit leases then stop serving
// priced requests, and a deleted node any request at all: ZN_ERR_NODE_DELETED): at once for NODE_DELETED; for a revoked credential only once the previous one was
// refused too and credential.json holds no newer one; never for CREDENTIAL_INVALID, _EXPIRED or
// _SUPERSEDED (this host's records can still be delivered), nor for a refusal the node recovers from
// by itself or an upgrade cures, nor while a rotation saved during the session gives a successor to try.
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { startConnectLoop } from '../../edge-node/src/control/connect-loop.js';
import type { ControlChannel, ControlCutOff } from '../../edge-node/src/control/control-channel.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { saveCredentials } from '../../edge-node/src/state/credential-store.js';
import { waitFor } from '../fixtures/wait-for.js';
import { newCredential, startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import type { EnrolledState } from './control-fixtures.js';

type Line = Record<string, unknown>;

/** A channel that records what the loop tells it. */
function recordingChannel(): ControlChannel & { events: Array<string | ControlCutOff> } {
  const events: Array<string | ControlCutOff> = [];
  return {
    name: 'recording',
    events,
    onEstablished: () => void events.push('established'),
    onMessage: () => false,
    onEnded: () => void events.push('ended'),
    onCutOff: (cut) => void events.push(cut),
  };
}

function startLoop(t: { teardown(fn: () => unknown): void }, state: EnrolledState, opts: { credentialPollMs?: number } = {}) {
  const lines: Line[] = [];
  const channel = recordingChannel();
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Line) } });
  const loop = startConnectLoop({
    store: state.store,
    logger,
    facts: { version: '0.1.0', hostname: 'h', arch: 'x64' },
    figures: () => ({ requests5m: 0, errors5m: 0, spoolBytes: 0, backfillBacklog: 0, appliedConfigVersion: 0, ready: true }),
    channels: [channel],
    reconnect: { baseMs: 20, maxMs: 200 },
    // Ten minutes: within a test only the first refusal of a streak and prompt retries happen.
    refusedRetryMs: 600_000,
    ...(opts.credentialPollMs !== undefined ? { credentialPollMs: opts.credentialPollMs } : {}),
  });
  t.teardown(() => loop.stop());
  const cuts = (): ControlCutOff[] => channel.events.filter((e): e is ControlCutOff => typeof e !== 'string');
  return { loop, lines, channel, cuts };
}

t.test('a deleted node is cut off for good at its NODE_DELETED refusal, and not by earlier refusals the node recovers from or an upgrade cures', async (t) => {
  const gateway = await startFakeGateway(t, {
    authorize: (session) => {
      if (session.index === 0) return { code: 'SERVER_UNAVAILABLE', message: 'the database is unreachable' };
      if (session.index === 1) return { code: 'PROTOCOL_INCOMPATIBLE', message: 'upgrade the node' };
      return { code: 'NODE_DELETED', message: 'node edge-test was deleted', status: grpc.status.UNAUTHENTICATED };
    },
  });
  const state = await writeEnrolledState(t.testdir({}), gateway, { credentials: { current: newCredential(), previous: newCredential() } });
  const { cuts, lines } = startLoop(t, state, { credentialPollMs: 50 });
  await waitFor(() => lines.find((l) => l.msg === 'control session ended' && l.code === 'PROTOCOL_INCOMPATIBLE'), { what: 'the PROTOCOL_INCOMPATIBLE refusal' });
  t.same(cuts(), [], 'SERVER_UNAVAILABLE and PROTOCOL_INCOMPATIBLE do not cut the node off');
  // Something new to try ends the slow retry (an upgrade's restart would do the same).
  await saveCredentials(state.store, { current: newCredential() });
  await waitFor(() => cuts().length === 1, { what: 'the cut-off' });
  t.same(cuts(), [{ code: 'NODE_DELETED', message: 'node edge-test was deleted', final: true }]);
  t.equal(gateway.sessions.length, 3, 'cut off at its first NODE_DELETED refusal, with no fallback tried');
});

t.test('a revoked credential cuts the node off only after the previous credential was refused too', async (t) => {
  const previous = newCredential();
  const current = newCredential();
  const gateway = await startFakeGateway(t, {
    authorize: () => ({ code: 'CREDENTIAL_REVOKED', message: 'the credential was revoked' }),
  });
  const state = await writeEnrolledState(t.testdir({}), gateway, { credentials: { current, previous } });
  const { cuts, lines } = startLoop(t, state);
  await waitFor(() => lines.find((l) => l.msg === 'control session ended' && l.retryInMs === 600_000), { what: 'the slow retry' });
  t.same(
    gateway.sessions.map((s) => (s.credential === current.secret ? 'current' : s.credential === previous.secret ? 'previous' : '?')),
    ['current', 'previous', 'current'],
    'current, the fallback, then current again before the slow retry',
  );
  t.same(cuts(), [{ code: 'CREDENTIAL_REVOKED', message: 'the credential was revoked', final: false }], 'cut off once, by the last refusal');
});

t.test('CREDENTIAL_INVALID, CREDENTIAL_EXPIRED and CREDENTIAL_SUPERSEDED never cut the node off, even with no credential left to try', async (t) => {
  // CREDENTIAL_INVALID: a control plane restarted on a wrong or restored database refuses current and
  // previous alike until it is put right; CREDENTIAL_EXPIRED: a node offline past its validity
  // re-enrolls on this host and delivers its spool; CREDENTIAL_SUPERSEDED: the replicas' rotation race.
  for (const code of ['CREDENTIAL_INVALID', 'CREDENTIAL_EXPIRED', 'CREDENTIAL_SUPERSEDED']) {
    await t.test(code, async (t) => {
      const previous = newCredential();
      const current = newCredential();
      const gateway = await startFakeGateway(t, { authorize: () => ({ code, message: `refused: ${code}` }) });
      const state = await writeEnrolledState(t.testdir({}), gateway, { credentials: { current, previous } });
      const { cuts, lines } = startLoop(t, state);
      await waitFor(() => lines.find((l) => l.msg === 'control session ended' && l.code === code && l.retryInMs === 600_000), { what: 'the slow retry' });
      t.same(cuts(), [], 'not cut off: the credit stays');
    });
  }
});

t.test('a credential refused after a rotation saved its successor is no cut-off, the successor revoked too is', async (t) => {
  const next = newCredential();
  const gateway = await startFakeGateway(t, {
    authorize: (session) => (session.index >= 2 ? { code: 'CREDENTIAL_REVOKED', message: 'the credential was revoked' } : undefined),
    onWelcome: (session) => {
      if (session.index !== 0) return;
      // The gateway ends a session on the credential it replaced (its ack never counted).
      session.send({ credentialRotation: { credentialId: next.id, credential: next.secret, expiresAt: BigInt(Date.parse(next.expiresAt)), previousValidUntil: 0n } });
      session.refuse('CREDENTIAL_EXPIRED', 'the credential expired');
    },
  });
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const { loop, cuts } = startLoop(t, state);
  await waitFor(() => gateway.sessions.length >= 2 && loop.status().state === 'connected', { what: 'a session on the successor' });
  t.equal(gateway.sessions[1]?.credential, next.secret);
  t.same(cuts(), [], 'not cut off: the successor was still to try');
  // The node is re-enrolled on another host: every credential of it is revoked.
  (await gateway.waitForSession(1)).refuse('CREDENTIAL_REVOKED', 'the credential was revoked');
  await waitFor(() => cuts().length === 1, { what: 'the cut-off' });
  t.same(
    gateway.sessions.slice(1).map((s) => (s.credential === next.secret ? 'successor' : s.credential === state.credentials.current.secret ? 'replaced' : '?')),
    ['successor', 'replaced', 'successor'],
    'cut off after the successor, its fallback and the successor again were refused',
  );
  t.match(cuts(), [{ code: 'CREDENTIAL_REVOKED', final: false }]);
});

t.test('a node cut off by a revocation is told of the session its re-enrollment on this host establishes', async (t) => {
  const replacement = newCredential();
  const gateway = await startFakeGateway(t, {
    authorize: (session) => (session.credential === replacement.secret ? undefined : { code: 'CREDENTIAL_REVOKED', message: 'the credential was revoked' }),
  });
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const { loop, cuts, channel } = startLoop(t, state, { credentialPollMs: 50 });
  await waitFor(() => cuts().length === 1, { what: 'the cut-off' });
  await saveCredentials(state.store, { current: replacement });
  await waitFor(() => loop.status().state === 'connected', { what: 'a session on the new credential' });
  t.match(channel.events, [{ code: 'CREDENTIAL_REVOKED', final: false }, 'established'], 'cut off, then established (which gives the credit back)');
});
