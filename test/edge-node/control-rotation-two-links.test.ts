// Two links of one node for a moment (a replica took the control link over; docs allow two links
// for at most one interval), each on another control-plane replica, both rotated from the same
// credential: the stale link's rotation, revoked by the live link's, arrives after the live link
// stored and acknowledged its own. credential.json must keep a credential the control plane still
// accepts after the handover window, not the revoked one. Real database and credentials; the stale
// link's replica is a scriptable gateway that rotates through the nodes module as a replica does.
import t from 'tap';
import { rotateCredential, verifyCredential } from '../../control-plane/src/nodes/credentials.js';
import { startConnectLoop } from '../../edge-node/src/control/connect-loop.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { IDENTITY_FILE, saveIdentity } from '../../edge-node/src/state/identity.js';
import type { NodeIdentity } from '../../edge-node/src/state/identity.js';
import { loadCredentials, saveCredentials } from '../../edge-node/src/state/credential-store.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import type { StateStore } from '../../edge-node/src/state/state-store.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { enrolledNode, gatewayIdentity, gatewaySettings, migratedPool, startTestGateway, timingsOf, waitForRow } from '../control-plane/gateway-harness.js';
import { startFakeGateway } from './control-fixtures.js';

type Line = Record<string, unknown>;
const DAY_MS = 86_400_000;
const HOUR_MS = 3_600_000;

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const live = await startTestGateway(t, { pool, settings, identity });

function loopOn(t: { teardown(fn: () => unknown): void }, store: StateStore, lines: Line[]): ReturnType<typeof startConnectLoop> {
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Line) } });
  const loop = startConnectLoop({
    store, logger, facts: { version: '0.1.0', hostname: 'h', arch: 'x64' },
    figures: () => ({ requests5m: 0, errors5m: 0, spoolBytes: 0, backfillBacklog: 0, appliedConfigVersion: 0, ready: true }),
    reconnect: { baseMs: 50, maxMs: 200 },
  });
  t.teardown(() => loop.stop());
  return loop;
}

t.test("a stale link's rotation arriving after the live link stored its own leaves credential.json with a credential that works past the handover window", async (t) => {
  // Issued two days ago: past rotate-after, so each replica rotates it on hello.
  const node = await enrolledNode(pool, settings, { issuedAt: new Date(Date.now() - 2 * DAY_MS) });
  const stale = await startFakeGateway(t);
  const store = await openStateStore(t.testdir({}), { create: true });
  const identityFor = (target: string, caPem: string): NodeIdentity => ({
    nodeId: node.id, nodeName: node.name, controlPlaneUrl: 'https://cp.example.test',
    gateway: { target, serverName: 'localhost', caPem },
    configSigningPublicKeyPem: live.signingKey.publicKeyPem, enrolledAt: new Date().toISOString(),
  });
  await saveIdentity(store, identityFor(`127.0.0.1:${live.server.port}`, identity.caPem));
  const expires = await pool.query<{ expires_at: Date }>('select expires_at from node_credentials where id = $1', [node.credentialId]);
  await saveCredentials(store, { current: { id: node.credentialId, secret: node.credential, expiresAt: expires.rows[0]!.expires_at.toISOString() } });

  // The stale link: the same state dir, its link to the other replica (identity.json read through it).
  const staleIdentity = identityFor(stale.target, stale.ca.certPem);
  const staleStore: StateStore = { ...store, path: (name) => store.path(name), read: (name) => (name === IDENTITY_FILE ? Promise.resolve(staleIdentity) : store.read(name)) };
  const staleLines: Line[] = [];
  loopOn(t, staleStore, staleLines);
  const staleSession = await stale.waitForSession(0);
  await waitFor(() => staleSession.received.some((m) => m.hello !== undefined), { what: "the stale link's hello" });
  t.equal(staleSession.credential, node.credential);
  // Its replica rotates the credential on hello; the reply is slow to arrive.
  const staleRotation = await rotateCredential(pool, node.id, node.credentialId, timingsOf(settings));

  // The live link connects to its replica with the same credential, is rotated (revoking the stale
  // link's successor, unacknowledged), stores and acknowledges.
  const liveLines: Line[] = [];
  loopOn(t, store, liveLines);
  const liveId = await waitFor(async () => {
    const file = await loadCredentials(store);
    return file !== undefined && file.current.id !== node.credentialId ? file.current.id : undefined;
  }, { what: 'the live link to store its rotation' });
  await waitForRow(pool, 'the live rotation to be acknowledged', 'select acknowledged_at from node_credentials where id = $1', [liveId],
    (r: { acknowledged_at: Date | null }) => r.acknowledged_at !== null);

  // Now the stale link's rotation reply arrives.
  staleSession.send({
    credentialRotation: {
      credentialId: staleRotation.credentialId,
      credential: staleRotation.credential,
      expiresAt: BigInt(staleRotation.expiresAt.getTime()),
      previousValidUntil: BigInt(staleRotation.previousValidUntil.getTime()),
    },
  });
  const staleAcked = (): boolean => staleSession.received.some((m) => m.credentialRotationAck !== undefined);
  await waitFor(() => staleAcked() || staleLines.some((l) => l.msg === 'did not store the rotated credential: credential.json no longer holds what this session started from; not acknowledged'),
    { what: 'the stale rotation to be handled' });
  t.notOk(staleAcked(), 'the stale link acknowledges nothing');

  const file = await loadCredentials(store);
  t.equal(file?.current.id, liveId, 'credential.json holds the live link\'s credential');
  const later = new Date(Date.now() + 2 * HOUR_MS);
  const check = await verifyCredential(pool, node.id, file?.current.secret, later);
  t.ok(check.ok, 'accepted past the handover window');
  const revoked = await verifyCredential(pool, node.id, staleRotation.credential);
  t.match(revoked, { ok: false, code: 'CREDENTIAL_REVOKED' }, "the stale link's successor was revoked, and is not in the file");
});
