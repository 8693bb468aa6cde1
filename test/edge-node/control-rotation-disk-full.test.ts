// A node whose state disk is full when its credential comes due for rotation keeps its control
// link (docs/spool.md, "Disk full"): with the real gateway and database, the node neither ends the
// session nor reconnects into a fresh rotation on every attempt, the credential rows stay bounded,
// and once space returns the rotation offered again on the same session is stored and acknowledged.
import t from 'tap';
import { ROTATION_REOFFER_AFTER_MS } from '../../control-plane/src/gateway/session.js';
import { startConnectLoop } from '../../edge-node/src/control/connect-loop.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { loadCredentials, saveCredentials } from '../../edge-node/src/state/credential-store.js';
import { saveIdentity } from '../../edge-node/src/state/identity.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import type { StateStore } from '../../edge-node/src/state/state-store.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { enrolledNode, gatewayIdentity, gatewaySettings, migratedPool, startTestGateway, waitForRow } from '../control-plane/gateway-harness.js';

type Line = Record<string, unknown>;
const DAY_MS = 86_400_000;
// Rotation checked every second, heartbeats every 200 ms.
const CHECK_MS = 1_000;

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url, { credentialRotateAfterMs: CHECK_MS, heartbeatIntervalMs: 200 });
const gateway = await startTestGateway(t, { pool, settings, identity });

t.test('a node whose state disk is full when its credential is due keeps one session and two credential rows, and takes the rotation once space returns', async (t) => {
  const node = await enrolledNode(pool, settings, { issuedAt: new Date(Date.now() - 2 * DAY_MS) });
  const real = await openStateStore(t.testdir({}), { create: true });
  await saveIdentity(real, {
    nodeId: node.id, nodeName: node.name, controlPlaneUrl: 'https://cp.example.test',
    gateway: { target: `127.0.0.1:${gateway.server.port}`, serverName: 'localhost', caPem: identity.caPem },
    configSigningPublicKeyPem: gateway.signingKey.publicKeyPem, enrolledAt: new Date().toISOString(),
  });
  const row = await pool.query<{ expires_at: Date }>('select expires_at from node_credentials where id = $1', [node.credentialId]);
  const inUse = { id: node.credentialId, secret: node.credential, expiresAt: row.rows[0]!.expires_at.toISOString() };
  await saveCredentials(real, { current: inUse });
  let diskFull = true;
  const store: StateStore = {
    dir: real.dir,
    path: (name) => real.path(name),
    read: (name) => real.read(name),
    write: async (name, value) => {
      if (!diskFull) return real.write(name, value);
      throw Object.assign(new Error(`ENOSPC: no space left on device, write '${name}'`), { code: 'ENOSPC' });
    },
  };
  const lines: Line[] = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Line) } });
  let heartbeats = 0;
  const loop = startConnectLoop({
    store, logger, facts: { version: '0.1.0', hostname: 'h', arch: 'x64' },
    figures: () => {
      heartbeats += 1;
      return { requests5m: 0, errors5m: 0, spoolBytes: 0, backfillBacklog: 0, appliedConfigVersion: 0, ready: true };
    },
    reconnect: { baseMs: 50, maxMs: 200 },
  });
  t.teardown(() => loop.stop());
  const storeFailures = (): Line[] => lines.filter((l) => typeof l.msg === 'string' && l.msg.startsWith('could not store the rotated credential'));
  await waitFor(() => storeFailures().length > 0, { what: 'the rotation on hello to fail to store' });

  // Several rotation checks pass on the session, heartbeats flowing.
  const until = performance.now() + 3 * CHECK_MS;
  await waitFor(() => performance.now() >= until && heartbeats > 10, { what: 'three rotation checks', timeoutMs: 10_000 });
  t.equal(lines.filter((l) => l.msg === 'control session established').length, 1, 'one session');
  t.same(lines.filter((l) => l.msg === 'control session ended'), [], 'never ended');
  t.equal(loop.status().state, 'connected');
  t.same(storeFailures().map((l) => l.level), [40], 'one warning');
  const rows = await pool.query<{ id: string }>('select id from node_credentials where node_id = $1 order by issued_at', [node.id]);
  t.equal(rows.rowCount, 2, 'the enrolled credential and one successor, however many checks pass');
  const successor = rows.rows[1]!.id;

  diskFull = false;
  gateway.shiftClock(ROTATION_REOFFER_AFTER_MS);
  await waitForRow(pool, 'the successor to be acknowledged', 'select acknowledged_at from node_credentials where id = $1', [successor],
    (r: { acknowledged_at: Date | null }) => r.acknowledged_at !== null);
  const file = await loadCredentials(real);
  t.equal(file?.current.id, successor, 'credential.json holds the successor');
  t.equal(file?.previous?.id, node.credentialId);
  t.equal((await pool.query('select 1 from node_credentials where node_id = $1', [node.id])).rowCount, 2, 'still two rows');
  t.equal(lines.filter((l) => l.msg === 'control session established').length, 1, 'on the same session');
});
