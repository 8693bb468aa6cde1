// One control session against a real grpc-js gateway over TLS: metadata and hello, heartbeats with
// live figures, rotation stored before it is acknowledged, refusals and TLS failures surfaced.
import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import type { Test } from 'tap';
import { PROTOCOL_VERSION } from '../../proto/src/index.js';
import type { NodeMessage } from '../../proto/src/index.js';
import { refusalAdvice } from '../../edge-node/src/control/refusal-advice.js';
import { runSession } from '../../edge-node/src/control/session.js';
import type { HeartbeatFigures, SessionOptions } from '../../edge-node/src/control/session.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { CREDENTIAL_FILE, storeRotatedCredential } from '../../edge-node/src/state/credential-store.js';
import type { CredentialFile } from '../../edge-node/src/state/credential-store.js';
import { createTestCa } from '../fixtures/tls.js';
import { waitFor } from '../fixtures/wait-for.js';
import { newCredential, startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import type { EnrolledState, FakeGateway } from './control-fixtures.js';

const FACTS = { version: '0.1.0', hostname: 'edge-host-1', arch: 'x64' };

function capturingLogger(): { logger: ReturnType<typeof createLogger>; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) } });
  return { logger, lines };
}

function sessionOptions(state: EnrolledState, overrides: Partial<SessionOptions> = {}): SessionOptions {
  const figures: HeartbeatFigures = { requests5m: 12, errors5m: 2, spoolBytes: 4096, backfillBacklog: 3, appliedConfigVersion: 0, ready: true };
  return {
    identity: state.identity,
    credential: state.credentials.current,
    facts: FACTS,
    figures: () => figures,
    storeRotatedCredential: (next, inUse) => storeRotatedCredential(state.store, next, inUse).then(() => undefined),
    logger: capturingLogger().logger,
    ...overrides,
  };
}

async function enrolled(t: Test, gateway: FakeGateway, serverName?: string): Promise<EnrolledState> {
  return writeEnrolledState(t.testdir({}), gateway, serverName !== undefined ? { serverName } : {});
}

t.test('the session sends its id and credential as metadata, a hello with version and protocol, then heartbeats', async (t) => {
  const gateway = await startFakeGateway(t, { heartbeatIntervalMs: 100 });
  const state = await enrolled(t, gateway);
  const { logger, lines } = capturingLogger();
  const abort = new AbortController();
  const established: string[] = [];
  const ended = runSession(sessionOptions(state, { logger, signal: abort.signal, onEstablished: (info) => established.push(info.sessionId) }));

  const session = await gateway.waitForSession(0);
  t.equal(session.nodeId, state.identity.nodeId, 'node id metadata');
  t.equal(session.credential, state.credentials.current.secret, 'credential metadata');
  const hello = await gateway.waitForMessage(session, (m) => m.hello !== undefined, 'hello');
  t.same(hello.hello, {
    nodeId: state.identity.nodeId,
    nodeName: 'edge-test',
    version: '0.1.0',
    protocolVersion: PROTOCOL_VERSION,
    hostname: 'edge-host-1',
    arch: 'x64',
    appliedConfigVersion: 0n,
  });
  t.equal(session.received[0], hello, 'the hello is the first message');

  await waitFor(() => session.received.filter((m) => m.heartbeat !== undefined).length >= 3, { what: 'three heartbeats' });
  const beat = session.received.find((m) => m.heartbeat !== undefined)!.heartbeat!;
  t.match(beat, { requests5m: 12n, errors5m: 2n, spoolBytes: 4096n, backfillBacklog: 3n, ready: true }, 'live figures from the provider');
  t.type(beat.sentAt, 'bigint');
  t.same(established, ['session-0']);
  t.notOk(JSON.stringify(lines).includes(state.credentials.current.secret), 'the credential is never logged');

  abort.abort();
  t.match(await ended, { reason: 'stopped', established: true, sessionId: 'session-0' });
});

t.test('a rotated credential is in credential.json before the gateway receives the acknowledgement', async (t) => {
  const next = newCredential();
  let fileAtAck: CredentialFile | undefined;
  let heartbeatsAtRotation = -1;
  const gateway = await startFakeGateway(t, {
    heartbeatIntervalMs: 100,
    onWelcome: (session) => {
      heartbeatsAtRotation = session.received.filter((m) => m.heartbeat !== undefined).length;
      session.send({
        credentialRotation: {
          credentialId: next.id,
          credential: next.secret,
          expiresAt: BigInt(Date.parse(next.expiresAt)),
          previousValidUntil: BigInt(Date.now() + 3_600_000),
        },
      });
    },
    onMessage: (_session, message: NodeMessage) => {
      if (message.credentialRotationAck !== undefined) {
        // Read synchronously at the moment the ack arrives: this is what a crash right now would leave.
        fileAtAck = JSON.parse(readFileSync(state.store.path(CREDENTIAL_FILE), 'utf8')) as CredentialFile;
      }
    },
  });
  const state = await enrolled(t, gateway);
  const original = state.credentials.current;
  const abort = new AbortController();
  let releaseStore: () => void = () => undefined;
  const storeMayProceed = new Promise<void>((resolve) => (releaseStore = resolve));
  const ended = runSession(
    sessionOptions(state, {
      signal: abort.signal,
      // Hold the write until the stream has moved on (a later heartbeat arrived): an implementation
      // that acknowledged before storing would have sent its ack by then, with the old file on disk.
      storeRotatedCredential: async (n, inUse) => {
        await storeMayProceed;
        await storeRotatedCredential(state.store, n, inUse);
      },
    }),
  );
  const session = await gateway.waitForSession(0);
  await waitFor(() => heartbeatsAtRotation >= 0 && session.received.filter((m) => m.heartbeat !== undefined).length > heartbeatsAtRotation + 1, {
    what: 'heartbeats after the rotation was sent',
  });
  releaseStore();
  const ack = await gateway.waitForMessage(session, (m) => m.credentialRotationAck !== undefined, 'rotation ack');
  t.equal(ack.credentialRotationAck?.credentialId, next.id);
  t.same(fileAtAck, { current: next, previous: original }, 'the new credential was durable before the ack, the old one kept as previous');
  abort.abort();
  await ended;
});

t.test('a refusal with a Refusal message surfaces its code and message', async (t) => {
  const gateway = await startFakeGateway(t, {
    authorize: () => ({ code: 'CREDENTIAL_REVOKED', message: 'this node\'s credentials were revoked', status: grpc.status.UNAUTHENTICATED }),
  });
  const state = await enrolled(t, gateway);
  const end = await runSession(sessionOptions(state));
  t.match(end, { reason: 'refused', code: 'CREDENTIAL_REVOKED', message: /credentials were revoked/, established: false });
});

t.test('a refusal carried only by the gRPC status details still surfaces its code', async (t) => {
  const gateway = await startFakeGateway(t, {
    onWelcome: (session) => session.fail(grpc.status.UNAUTHENTICATED, 'NODE_DELETED: node edge-test was deleted'),
  });
  const state = await enrolled(t, gateway);
  const end = await runSession(sessionOptions(state));
  t.match(end, { reason: 'refused', code: 'NODE_DELETED', message: 'node edge-test was deleted', established: true });
});

t.test('an incompatible protocol is refused after the hello and reported as PROTOCOL_INCOMPATIBLE', async (t) => {
  // Refuse as the real gateway does: after reading the hello's protocol version.
  const refusing = await startFakeGateway(t, { answerHello: false });
  const state = await enrolled(t, refusing);
  const ended = runSession(sessionOptions(state, { facts: { ...FACTS, protocolVersion: PROTOCOL_VERSION + 1 } }));
  const session = await refusing.waitForSession(0);
  const hello = await refusing.waitForMessage(session, (m) => m.hello !== undefined, 'hello');
  t.equal(hello.hello?.protocolVersion, PROTOCOL_VERSION + 1, 'the node said which protocol it speaks');
  session.refuse('PROTOCOL_INCOMPATIBLE', 'control protocol mismatch: this side speaks v1, the peer speaks v2', grpc.status.FAILED_PRECONDITION);
  t.match(await ended, { reason: 'refused', code: 'PROTOCOL_INCOMPATIBLE', message: /protocol mismatch/ });
});

t.test('a gateway certificate from another CA is GATEWAY_TLS_UNTRUSTED and the gateway never sees the call', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), { target: gateway.target, ca: await createTestCa() });
  const end = await runSession(sessionOptions(state));
  t.match(end, { reason: 'disconnected', code: 'GATEWAY_TLS_UNTRUSTED', established: false });
  t.equal(gateway.sessions.length, 0);
});

t.test('a gateway certificate without the saved server name is GATEWAY_TLS_NAME_MISMATCH', async (t) => {
  const gateway = await startFakeGateway(t, { dnsNames: ['localhost'] });
  const state = await enrolled(t, gateway, 'gateway.other.example');
  const end = await runSession(sessionOptions(state));
  t.match(end, { reason: 'disconnected', code: 'GATEWAY_TLS_NAME_MISMATCH', message: /gateway\.other\.example/ });
  t.equal(gateway.sessions.length, 0, 'no call reached the gateway, so the credential was not sent');
});

t.test('the advice for GATEWAY_TLS_NAME_MISMATCH is to re-enroll or serve a certificate naming it, never to only add the name to ZENOVA_GATEWAY_HOSTS', async (t) => {
  const advice = refusalAdvice('GATEWAY_TLS_NAME_MISMATCH') ?? '';
  t.match(advice, /check that the gateway address reaches the node gateway, not another TLS server/);
  t.match(advice, /re-enroll this node against a name the gateway certificate covers, or serve a gateway certificate that names it/);
  t.match(advice, /external certificate: reissue it with that name; generated identity: it is never reissued, so replacing it means re-enrolling every node/);
  t.notMatch(advice, /add that name to ZENOVA_GATEWAY_HOSTS/, 'adding the name changes no certificate and stops the control plane from starting');
});

t.test('a gateway that never answers the hello ends the session with HELLO_TIMEOUT', async (t) => {
  const gateway = await startFakeGateway(t, { answerHello: false });
  const state = await enrolled(t, gateway);
  const end = await runSession(sessionOptions(state, { helloTimeoutMs: 300 }));
  t.match(end, { reason: 'disconnected', code: 'HELLO_TIMEOUT', established: false });
  t.equal(gateway.sessions[0]?.credential, state.credentials.current.secret);
  t.equal(gateway.sessions[0]?.received.length, 1, 'only the hello was sent');
});
