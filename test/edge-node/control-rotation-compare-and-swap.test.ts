// A rotated credential is stored only while credential.json still holds what the session started
// from (or the session's own last write): a second link of the node for a moment after a replica
// took the link over, or a re-enrollment while serving, must not have an older rotation written
// over the newer credential (the file would hold a revoked credential, the working one only in
// another process's memory). Against a scriptable TLS gateway and the real connect loop.
import t from 'tap';
import { startConnectLoop } from '../../edge-node/src/control/connect-loop.js';
import type { ConnectLoop } from '../../edge-node/src/control/connect-loop.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { loadCredentials, saveCredentials, storeRotatedCredential } from '../../edge-node/src/state/credential-store.js';
import type { StoredCredential } from '../../edge-node/src/state/credential-store.js';
import type { ControlMessage } from '../../proto/src/index.js';
import { waitFor } from '../fixtures/wait-for.js';
import { newCredential, startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import type { EnrolledState, FakeSession } from './control-fixtures.js';

type Line = Record<string, unknown>;

function startLoop(t: { teardown(fn: () => unknown): void }, state: EnrolledState): { loop: ConnectLoop; lines: Line[] } {
  const lines: Line[] = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Line) } });
  const loop = startConnectLoop({
    store: state.store,
    logger,
    facts: { version: '0.1.0', hostname: 'h', arch: 'x64' },
    figures: () => ({ requests5m: 0, errors5m: 0, spoolBytes: 0, backfillBacklog: 0, appliedConfigVersion: 0, ready: true }),
    reconnect: { baseMs: 20, maxMs: 200 },
    refusedRetryMs: 60_000,
    credentialPollMs: 50,
  });
  t.teardown(() => loop.stop());
  return { loop, lines };
}

function rotationTo(credential: StoredCredential): ControlMessage {
  return {
    credentialRotation: {
      credentialId: credential.id,
      credential: credential.secret,
      expiresAt: BigInt(Date.parse(credential.expiresAt)),
      previousValidUntil: BigInt(Date.now() + 3_600_000),
    },
  };
}

const acksOf = (session: FakeSession): string[] =>
  session.received.flatMap((m) => (m.credentialRotationAck !== undefined ? [m.credentialRotationAck.credentialId] : []));
const heartbeatsOf = (session: FakeSession): number => session.received.filter((m) => m.heartbeat !== undefined).length;
const NOT_STORED = 'did not store the rotated credential: credential.json no longer holds what this session started from; not acknowledged';
/** The session has dealt with the rotation sent: left it unstored, or (wrongly) acknowledged it. */
const handled = (lines: Line[], session: FakeSession): boolean => lines.some((l) => l.msg === NOT_STORED) || acksOf(session).length > 0;

t.test('a rotation arriving after another node-edge process stored its own is neither stored nor acknowledged, and the session stays up', async (t) => {
  const gateway = await startFakeGateway(t);
  const inUse = newCredential();
  const state = await writeEnrolledState(t.testdir({}), gateway, { credentials: { current: inUse } });
  const { loop, lines } = startLoop(t, state);
  const session = await gateway.waitForSession(0);
  await waitFor(() => loop.status().state === 'connected', { what: 'the session' });

  // The other link (the replica that now holds it) was rotated from the same credential and stored first.
  const theirs = newCredential();
  await storeRotatedCredential(state.store, theirs, inUse);
  const stale = newCredential();
  session.send(rotationTo(stale));

  await waitFor(() => handled(lines, session), { what: 'the rotation to be handled' });
  t.same(await loadCredentials(state.store), { current: theirs, previous: inUse }, "the other process's credential stays in credential.json");
  t.same(acksOf(session), [], 'the rotation is not acknowledged');
  t.match(lines.find((l) => l.msg === NOT_STORED), { level: 40, credentialId: stale.id, reason: new RegExp(`held current ${inUse.id}, now current ${theirs.id}, previous ${inUse.id}`) }, 'logged, naming what changed');
  const beats = heartbeatsOf(session);
  await waitFor(() => heartbeatsOf(session) > beats + 1, { what: 'heartbeats after the rotation' });
  t.equal(loop.status().state, 'connected', 'the session stays up');
  t.equal(gateway.sessions.length, 1, 'no reconnect');
  t.notOk(JSON.stringify(lines).includes(stale.secret), 'no secret in the log');
});

t.test("a re-enrollment's credential written while the node serves is left in place by a rotation of the session it replaces, and the next session uses it", async (t) => {
  const gateway = await startFakeGateway(t, {
    authorize: (s) => (s.index > 0 && s.credential !== reenrolled.secret ? { code: 'CREDENTIAL_REVOKED', message: 'revoked' } : undefined),
  });
  const reenrolled = newCredential();
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const { loop, lines } = startLoop(t, state);
  const session = await gateway.waitForSession(0);
  await waitFor(() => loop.status().state === 'connected', { what: 'the session' });

  // `zenova-node enroll --reenroll` writes the new node's credential while serve runs.
  await saveCredentials(state.store, { current: reenrolled });
  session.send(rotationTo(newCredential()));
  await waitFor(() => handled(lines, session), { what: 'the rotation to be handled' });
  t.same(await loadCredentials(state.store), { current: reenrolled }, 'the re-enrollment stays');
  t.same(acksOf(session), [], 'not acknowledged');

  // The re-enrollment revoked the old credential: the control plane ends the session on it.
  session.refuse('CREDENTIAL_REVOKED', 'revoked');
  const next = await gateway.waitForSession(1);
  t.equal(next.credential, reenrolled.secret, 'the next session authenticates with the re-enrolled credential');
});

t.test('a session on the previous credential after the current one was refused stores its rotations: the first against the file it started from, the next against its own write', async (t) => {
  const previous = newCredential();
  const refused = newCredential();
  const gateway = await startFakeGateway(t, {
    authorize: (s) => (s.credential === refused.secret ? { code: 'CREDENTIAL_REVOKED', message: 'revoked by a later rotation' } : undefined),
  });
  const state = await writeEnrolledState(t.testdir({}), gateway, { credentials: { current: refused, previous } });
  const { loop } = startLoop(t, state);
  await waitFor(() => loop.status().state === 'connected', { what: 'a session on the previous credential' });
  const session = gateway.sessions.at(-1)!;
  t.equal(session.credential, previous.secret);

  const first = newCredential();
  session.send(rotationTo(first));
  await waitFor(() => acksOf(session).includes(first.id), { what: 'the first rotation to be acknowledged' });
  t.same(await loadCredentials(state.store), { current: first, previous }, 'stored with the credential in use as previous');

  const second = newCredential();
  session.send(rotationTo(second));
  await waitFor(() => acksOf(session).includes(second.id), { what: 'the second rotation to be acknowledged' });
  t.same(await loadCredentials(state.store), { current: second, previous: first });
});
