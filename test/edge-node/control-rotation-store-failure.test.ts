// A rotated credential the node cannot store (its state disk full) does not cost it the control
// link (docs/spool.md, "Disk full"): the session stays up, the rotation stays unacknowledged (the
// control plane keeps the credential in use valid), the failure is warned about once per rotation,
// and the same rotation offered again once space has returned is stored and acknowledged.
import t from 'tap';
import { startConnectLoop } from '../../edge-node/src/control/connect-loop.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { loadCredentials } from '../../edge-node/src/state/credential-store.js';
import type { StoredCredential } from '../../edge-node/src/state/credential-store.js';
import type { StateStore } from '../../edge-node/src/state/state-store.js';
import type { ControlMessage } from '../../proto/src/index.js';
import { waitFor } from '../fixtures/wait-for.js';
import { newCredential, startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import type { FakeSession } from './control-fixtures.js';

type Line = Record<string, unknown>;

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

const STORE_FAILED = 'could not store the rotated credential: not acknowledged; the session goes on with the credential in use, and the control plane offers the rotation again later';

t.test('a rotation the node cannot store keeps the session up and unacknowledged, is warned about once, and is stored when offered again after space returns', async (t) => {
  const gateway = await startFakeGateway(t);
  const inUse = newCredential();
  const state = await writeEnrolledState(t.testdir({}), gateway, { credentials: { current: inUse } });
  let diskFull = false;
  // Every write fails as on a full disk (control-status.json too), reads work.
  const store: StateStore = {
    dir: state.store.dir,
    path: (name) => state.store.path(name),
    read: (name) => state.store.read(name),
    write: async (name, value) => {
      if (!diskFull) return state.store.write(name, value);
      throw Object.assign(new Error(`ENOSPC: no space left on device, write '${name}'`), { code: 'ENOSPC' });
    },
  };
  const lines: Line[] = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Line) } });
  const loop = startConnectLoop({
    store,
    logger,
    facts: { version: '0.1.0', hostname: 'h', arch: 'x64' },
    figures: () => ({ requests5m: 0, errors5m: 0, spoolBytes: 0, backfillBacklog: 0, appliedConfigVersion: 0, ready: true }),
    reconnect: { baseMs: 20, maxMs: 200 },
  });
  t.teardown(() => loop.stop());
  const session: FakeSession = await gateway.waitForSession(0);
  await waitFor(() => loop.status().state === 'connected', { what: 'the session' });
  const acks = (): string[] => session.received.flatMap((m) => (m.credentialRotationAck !== undefined ? [m.credentialRotationAck.credentialId] : []));
  const failures = (): Line[] => lines.filter((l) => l.msg === STORE_FAILED);

  diskFull = true;
  const next = newCredential();
  session.send(rotationTo(next));
  await waitFor(() => failures().length === 1 || session.ended, { what: 'the failed store to be handled' });
  t.equal(session.ended, false, 'the session is not ended');
  // Offered again while the disk is still full: logged again, but not as a warning.
  session.send(rotationTo(next));
  await waitFor(() => failures().length === 2, { what: 'the second failed store to be logged' });
  t.same(failures().map((l) => l.level), [40, 20], 'one warning per rotation, the repeats at debug level');
  t.match(failures()[0], { credentialId: next.id, err: { code: 'ENOSPC' } });
  const beats = session.received.filter((m) => m.heartbeat !== undefined).length;
  await waitFor(() => session.received.filter((m) => m.heartbeat !== undefined).length > beats + 1, { what: 'heartbeats after the failed stores' });
  t.same(acks(), [], 'nothing acknowledged');
  t.equal(loop.status().state, 'connected', 'the session stays up');
  t.equal(gateway.sessions.length, 1, 'no reconnect');
  t.notOk(lines.some((l) => l.msg === 'control session ended'), 'the node does not end the session itself');
  t.same(await loadCredentials(state.store), { current: inUse }, 'credential.json unchanged');

  diskFull = false;
  session.send(rotationTo(next));
  await waitFor(() => acks().includes(next.id), { what: 'the rotation to be acknowledged once space returned' });
  t.same(await loadCredentials(state.store), { current: next, previous: inUse });
  t.equal(gateway.sessions.length, 1, 'still the first session');
});
