/**
 * The central node is refused deletion for what makes deleting it harmful, not for its name alone:
 * the dev stack (dev-stack/office-primary.ts) creates office-primary through the same admin API as
 * any node, so nothing else tells it from an office-primary an operator created by mistake, and such
 * a node could never be removed. Until it has enrolled nothing runs it: deleting it cuts nothing off,
 * and the central install creates it again (its look-up finds no node, as on a first start). Once it
 * has enrolled, a host serves with its identity, which a delete would end for good:
 * 409 ZN_ERR_CP_NODE_CENTRAL, judged under the node's row lock, so an enrollment that commits while
 * the delete waits is seen.
 */
import pg from 'pg';
import t from 'tap';
import { verifyCredential } from '../../control-plane/src/nodes/credentials.js';
import { CENTRAL_NODE_NAME } from '../../control-plane/src/nodes/node-validation.js';
import { hashInstallToken } from '../../control-plane/src/nodes/install-tokens.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bearer, createNode, enroll, issue, migratedPool, nodesApp } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { app } = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 1_000 } });

interface ErrorReply { error: { code: string; message: string } }
interface Enrolled { nodeId: string; credential: { secret: string } }

const deleteCentral = (headers: Record<string, string> = {}) =>
  app.inject({ method: 'DELETE', url: `/api/v1/nodes/${CENTRAL_NODE_NAME}`, headers: { ...bearer, ...headers } });
const showCentral = () => app.inject({ method: 'GET', url: `/api/v1/nodes/${CENTRAL_NODE_NAME}`, headers: bearer });

t.test('an office-primary created through the API and never enrolled is deleted like any node, and can be created again', async (t) => {
  // Whatever this test leaves (nothing in the API deletes an enrolled office-primary), the next starts without it.
  t.teardown(async () => {
    await pool.query('update nodes set deleted_at = now() where name = $1 and deleted_at is null', [CENTRAL_NODE_NAME]);
  });
  const created = await createNode(app, { name: CENTRAL_NODE_NAME, region: 'central' });
  const deleted = await deleteCentral();
  t.equal(deleted.statusCode, 200, deleted.body);
  t.same(deleted.json(), { deleted: CENTRAL_NODE_NAME });
  t.equal((await showCentral()).statusCode, 404, 'gone');
  const { rows } = await pool.query('select 1 from install_tokens where node_id = $1 and used_at is null and invalidated_at is null', [created.node.id]);
  t.equal(rows.length, 0, 'its install token no longer enrolls');
  const late = await enroll(app, created.install.token);
  t.ok(late.statusCode >= 400 && late.statusCode < 500, `its install command is dead: ${late.statusCode} ${late.body}`);

  // As the central install does on its next start: no node of that name, so it creates and enrolls it.
  const again = await createNode(app, { name: CENTRAL_NODE_NAME, region: 'central' });
  t.not(again.node.id, created.node.id, 'a new node under the freed name');
  const enrolled = (await enroll(app, again.install.token)).json<Enrolled>();
  t.equal((await verifyCredential(pool, enrolled.nodeId, enrolled.credential.secret)).ok, true);

  const refused = await deleteCentral();
  t.equal(refused.statusCode, 409, 'once enrolled it is the central node');
  t.equal(refused.json<ErrorReply>().error.code, 'ZN_ERR_CP_NODE_CENTRAL');
  t.match(refused.json<ErrorReply>().error.message, /office-primary is the central node, installed with the control plane/);
  t.equal((await verifyCredential(pool, enrolled.nodeId, enrolled.credential.secret)).ok, true, 'its credential still works');
  // A reenroll command issued since does not make it deletable: it has enrolled all the same.
  const reissued = await issue(app, CENTRAL_NODE_NAME, 'reenroll');
  t.equal(reissued.statusCode, 200, reissued.body);
  t.equal((await deleteCentral()).statusCode, 409);
  t.equal((await showCentral()).statusCode, 200, 'it stays');
});

t.test('an office-primary enrolling while its delete waits for the row is seen enrolled: 409, and it keeps working', async (t) => {
  const { install } = await createNode(app, { name: CENTRAL_NODE_NAME, region: 'central' });
  // The enrollment queues behind this token lock and then takes the node's row lock before the
  // delete (enrollment-delete-race.test.ts: both lock the node row, then the token rows).
  const holder = new pg.Client({ connectionString: db.url });
  await holder.connect();
  t.teardown(() => holder.end());
  await holder.query('begin');
  await holder.query('select 1 from install_tokens where token_hash = $1 for update', [hashInstallToken(install.token)]);
  const waitingOnLocks = async (): Promise<number> => {
    const { rows } = await pool.query<{ n: number }>(
      "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'",
    );
    return rows[0]!.n;
  };
  const enrolling = enroll(app, install.token);
  await waitFor(async () => (await waitingOnLocks()) >= 1, { what: 'the enrollment to wait on a lock' });
  const deleting = deleteCentral();
  await waitFor(async () => (await waitingOnLocks()) >= 2, { what: 'the delete to wait on a lock' });
  await holder.query('commit');
  const [enrolled, deleted] = await Promise.all([enrolling, deleting]);
  t.equal(enrolled.statusCode, 200, enrolled.body);
  t.equal(deleted.statusCode, 409, `the delete read the row the enrollment committed: ${deleted.body}`);
  t.equal(deleted.json<ErrorReply>().error.code, 'ZN_ERR_CP_NODE_CENTRAL');
  const { nodeId, credential } = enrolled.json<Enrolled>();
  t.equal((await verifyCredential(pool, nodeId, credential.secret)).ok, true, 'its credential works');
  t.equal((await showCentral()).statusCode, 200);
});

