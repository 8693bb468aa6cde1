/**
 * A re-enrollment with another node's reenroll token (the wrong row's command pasted), against real
 * PostgreSQL: a node that names the node its state dir holds (`installedNodeId`) is refused with
 * ZN_ERR_CP_TOKEN_WRONG_NODE while that node is live, and nothing is revoked or used; its own token,
 * a deleted-and-created-again node, and an older node that names none still re-enroll.
 */
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { verifyCredential } from '../../control-plane/src/nodes/credentials.js';
import { testDatabase } from '../fixtures/postgres.js';
import { bearer, createNode, FACTS, issue, migratedPool, nodesApp } from './nodes-harness.js';
import type { CreatedNode } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { app, pool } = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 1_000 } });

interface Enrolled { nodeId: string; nodeName: string; credential: { id: string; secret: string } }
interface ErrorBody { error: { code: string; type: string; message: string } }

async function redeem(token: string, mode: 'install' | 'reenroll', installedNodeId?: string, redemptionKey?: string) {
  return app.inject({
    method: 'POST',
    url: '/api/enroll',
    payload: {
      token, mode, facts: FACTS,
      ...(installedNodeId !== undefined ? { installedNodeId } : {}),
      ...(redemptionKey !== undefined ? { redemptionKey } : {}),
    },
  });
}

/** A node created and enrolled with its install command: its id and live credential. */
async function enrolledNode(): Promise<{ created: CreatedNode; enrolled: Enrolled }> {
  const created = await createNode(app);
  const res = await redeem(created.install.token, 'install');
  if (res.statusCode !== 200) throw new Error(`enroll: ${res.statusCode} ${res.body}`);
  return { created, enrolled: res.json<Enrolled>() };
}

const reenrollToken = async (name: string): Promise<string> => (await issue(app, name, 'reenroll')).json<{ token: string }>().token;

t.test('another live node\'s reenroll token, named the host\'s node, is refused with TOKEN_WRONG_NODE and nothing is revoked or used', async (t) => {
  const x = await enrolledNode();
  const y = await enrolledNode();
  const yToken = await reenrollToken(y.created.node.name);

  const res = await redeem(yToken, 'reenroll', x.enrolled.nodeId, randomBytes(32).toString('base64url'));
  t.equal(res.statusCode, 403, res.body);
  const body = res.json<ErrorBody>();
  t.equal(body.error.code, 'ZN_ERR_CP_TOKEN_WRONG_NODE');
  t.equal(body.error.type, 'permission_error');
  const xName = x.created.node.name;
  t.match(body.error.message, 'than the one this host holds', 'says the token is of another node than the host\'s');
  t.match(body.error.message, 'zenova gateway-node reenroll-command NAME', 'advises the host node\'s own reenroll command');
  t.match(body.error.message, 'zenova gateway-node delete NAME --yes', 'or deleting it first');
  // A token holder must not learn a live node's name (nor confirm its id) from an id it tries.
  t.notMatch(body.error.message, xName, 'the installed node is not named');
  t.notMatch(body.error.message, x.enrolled.nodeId, 'nor its id quoted');
  t.notMatch(body.error.message, y.created.node.name, 'the token\'s node is not named');

  t.match(await verifyCredential(pool, y.enrolled.nodeId, y.enrolled.credential.secret), { ok: true }, 'the token\'s node keeps its credential');
  t.match(await verifyCredential(pool, x.enrolled.nodeId, x.enrolled.credential.secret), { ok: true }, 'the host\'s node keeps its credential');
  const { rows } = await pool.query<{ used: boolean }>(
    'select count(*) filter (where used_at is not null) > 0 as used from install_tokens where node_id = $1 and kind = $2',
    [y.enrolled.nodeId, 'reenroll'],
  );
  t.equal(rows[0]!.used, false, 'the token was not used');

  // Still usable where it belongs: Y's own host re-enrolls with it.
  const own = await redeem(yToken, 'reenroll', y.enrolled.nodeId);
  t.equal(own.statusCode, 200, own.body);
  t.equal(own.json<Enrolled>().nodeId, y.enrolled.nodeId);
});

t.test('a node re-enrolled with its own reenroll token, naming itself, gets a new credential and the old one is revoked', async (t) => {
  const x = await enrolledNode();
  const res = await redeem(await reenrollToken(x.created.node.name), 'reenroll', x.enrolled.nodeId);
  t.equal(res.statusCode, 200, res.body);
  const again = res.json<Enrolled>();
  t.equal(again.nodeId, x.enrolled.nodeId);
  t.match(await verifyCredential(pool, x.enrolled.nodeId, x.enrolled.credential.secret), { ok: false, code: 'CREDENTIAL_REVOKED' });
  t.match(await verifyCredential(pool, again.nodeId, again.credential.secret), { ok: true });
});

t.test('a host whose node was deleted and created again (a new id) re-enrolls as the new node', async (t) => {
  const x = await enrolledNode();
  const name = x.created.node.name;
  t.equal((await app.inject({ method: 'DELETE', url: `/api/v1/nodes/${name}`, headers: bearer })).statusCode, 200);
  const recreated = await createNode(app, { name });
  t.not(recreated.node.id, x.enrolled.nodeId);
  const res = await redeem(await reenrollToken(name), 'reenroll', x.enrolled.nodeId);
  t.equal(res.statusCode, 200, res.body);
  t.equal(res.json<Enrolled>().nodeId, recreated.node.id);
});

t.test('an older node that names no installed node re-enrolls with another node\'s token as before', async (t) => {
  const y = await enrolledNode();
  const res = await redeem(await reenrollToken(y.created.node.name), 'reenroll');
  t.equal(res.statusCode, 200, res.body);
  t.match(await verifyCredential(pool, y.enrolled.nodeId, y.enrolled.credential.secret), { ok: false, code: 'CREDENTIAL_REVOKED' });
});

t.test('an installed node id that is no node id, or of no node, does not stand in the way', async (t) => {
  for (const installed of ['not-a-uuid', '00000000-0000-4000-8000-000000000000']) {
    const y = await enrolledNode();
    const res = await redeem(await reenrollToken(y.created.node.name), 'reenroll', installed);
    t.equal(res.statusCode, 200, `${installed}: ${res.body}`);
  }
});

t.test('an install names no installed node to protect: installedNodeId there is not looked up, so it tells nothing about a node', async (t) => {
  const x = await enrolledNode();
  const p = await createNode(app);
  const res = await redeem(p.install.token, 'install', x.enrolled.nodeId);
  t.equal(res.statusCode, 200, res.body);
  t.notMatch(res.body, x.created.node.name, 'the live node is not named');
});

t.test('the preflight says this control plane takes installedNodeId', async (t) => {
  const res = await app.inject({ method: 'GET', url: '/api/enroll/preflight' });
  t.equal(res.json<{ installedNodeIds: boolean }>().installedNodeIds, true);
});
