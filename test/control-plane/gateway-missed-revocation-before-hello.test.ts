// Node events sent while the gateway's LISTEN connection was down are lost; when it comes back
// every session past authentication is re-checked, not only live ones: a session that authenticated
// before a revocation and says hello only after the listener returned must be refused, not welcomed.
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { connectNode, enrolledNode, gatewayIdentity, gatewaySettings, helloFor, migratedPool, refusalOf, startTestGateway, waitForRow } from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const gateway = await startTestGateway(t, { pool, settings, identity });

t.test('a session that authenticated before a revocation whose event was lost is refused at its hello once the event connection is back', async (t) => {
  const node = await enrolledNode(pool, settings);
  const conn = connectNode(t, gateway.server.port, identity.caPem, { nodeId: node.id, credential: node.credential });
  // Authenticating with a credential not yet acknowledged acknowledges it: the session is past authentication.
  await waitForRow(pool, 'the credential check', 'select acknowledged_at from node_credentials where id = $1', [node.credentialId],
    (r: { acknowledged_at: Date | null }) => r.acknowledged_at !== null);

  // Revoked without a NOTIFY (as if it had been sent while the listener was away), then the listener drops.
  await pool.query('update node_credentials set revoked_at = now() where node_id = $1', [node.id]);
  const reopened = (): number => gateway.log.lines().filter((l) => l.msg === 'node-event connection re-opened').length;
  const before = reopened();
  await pool.query("select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and application_name = 'zenova-control-node-events'");
  await waitFor(() => reopened() > before, { what: 'the event connection to be re-opened' });

  conn.send(helloFor(node));
  const refusal = await refusalOf(conn, 'the session on the revoked credential');
  t.equal(refusal.code, 'CREDENTIAL_REVOKED');
  t.equal(gateway.server.sessionCount(), 0, 'no live session');
  t.notOk(conn.received.some((m) => m.helloAck !== undefined), 'never welcomed');
});
