// A rotation the node receives is saved even when the stream ends before the node got to it: the
// node then connects with the newer credential (which acknowledges it on the control plane) instead
// of the old one. No ack is sent on an ended stream, and the session reports its end only once the
// credential is saved, so the next connect reads it.
import { readFileSync } from 'node:fs';
import t from 'tap';
import type { CredentialRotation } from '../../proto/src/index.js';
import { runSession } from '../../edge-node/src/control/session.js';
import type { SessionOptions } from '../../edge-node/src/control/session.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { CREDENTIAL_FILE, storeRotatedCredential } from '../../edge-node/src/state/credential-store.js';
import type { CredentialFile, StoredCredential } from '../../edge-node/src/state/credential-store.js';
import { newCredential, startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import type { EnrolledState } from './control-fixtures.js';

const FACTS = { version: '0.1.0', hostname: 'edge-host-1', arch: 'x64' };
const quietLogger = createLogger({ level: 'silent', destination: { write: () => undefined } });

function rotationOf(next: StoredCredential): CredentialRotation {
  return { credentialId: next.id, credential: next.secret, expiresAt: BigInt(Date.parse(next.expiresAt)), previousValidUntil: BigInt(Date.now() + 3_600_000) };
}

function sessionOptions(state: EnrolledState, overrides: Partial<SessionOptions> = {}): SessionOptions {
  return {
    identity: state.identity,
    credential: state.credentials.current,
    facts: FACTS,
    figures: () => ({ requests5m: 0, errors5m: 0, spoolBytes: 0, backfillBacklog: 0, appliedConfigVersion: 0, ready: true }),
    storeRotatedCredential: (next, inUse) => storeRotatedCredential(state.store, next, inUse).then(() => undefined),
    logger: quietLogger,
    ...overrides,
  };
}

const fileOf = (state: EnrolledState): CredentialFile => JSON.parse(readFileSync(state.store.path(CREDENTIAL_FILE), 'utf8')) as CredentialFile;

t.test('a rotation that arrives as the stream ends is saved before the session reports its end', async (t) => {
  const next = newCredential();
  const gateway = await startFakeGateway(t, {
    onWelcome: (session) => {
      session.send({ credentialRotation: rotationOf(next) });
      session.close();
    },
  });
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const original = state.credentials.current;
  const end = await runSession(sessionOptions(state));
  t.match(end, { reason: 'disconnected', established: true });
  // Read at the moment the end is reported: the connect loop loads credential.json right then.
  t.same(fileOf(state), { current: next, previous: original }, 'the new credential is current, the old one kept as previous');
});

t.test('a rotation still queued when the stream ends is saved too, and no ack is sent for it', async (t) => {
  const first = newCredential();
  const second = newCredential();
  const gateway = await startFakeGateway(t, {
    onWelcome: (session) => {
      session.send({ credentialRotation: rotationOf(first) });
      session.send({ credentialRotation: rotationOf(second) });
      session.close();
    },
  });
  const state = await writeEnrolledState(t.testdir({}), gateway);
  let releaseFirst: () => void = () => undefined;
  const firstMayProceed = new Promise<void>((resolve) => (releaseFirst = resolve));
  let ended = false;
  const session = runSession(
    sessionOptions(state, {
      // The first save is slow: the stream has ended by the time the second rotation's turn comes.
      storeRotatedCredential: async (n, inUse) => {
        if (n.id === first.id) await firstMayProceed;
        await storeRotatedCredential(state.store, n, inUse);
      },
    }),
  );
  void session.then(() => (ended = true));
  const gatewaySession = await gateway.waitForSession(0);
  // Give the client time to see the end of the stream while the first save is still held.
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.ok(gatewaySession.ended, 'the gateway ended the stream');
  t.notOk(ended, 'the session does not report its end while a rotation is being saved');
  releaseFirst();
  const end = await session;
  t.match(end, { reason: 'disconnected', established: true });
  t.same(fileOf(state), { current: second, previous: first }, 'the newest rotation is current');
  t.notOk(gatewaySession.received.some((m) => m.credentialRotationAck?.credentialId === second.id), 'no ack for a rotation saved after the end');
});
