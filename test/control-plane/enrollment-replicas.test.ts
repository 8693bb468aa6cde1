/**
 * The node's `replicas` in the answers the installer reads, against real PostgreSQL: `POST
 * /api/enroll` (install and reenroll) and `POST /api/enroll/upgrade` carry the count the node was
 * created with, so the installer writes it to etc/node.env; the node side reads an answer without it
 * (an older control plane) as 1, and the count the control plane sends passes the node's own schema.
 */
import t from 'tap';
import { enrollResponseSchema as nodeEnrollResponseSchema } from '../../edge-node/src/enroll/enroll-api.js';
import { upgradeAnswerSchema } from '../../installer/src/install/upgrade-token.js';
import { productVersion } from '../../proto/src/product-version.js';
import { PROTOCOL_VERSION } from '../../proto/src/protocol-version.js';
import { testDatabase } from '../fixtures/postgres.js';
import { createNode, enroll, issue, migratedPool, nodesApp } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { app } = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 1_000 } });

t.test('the enrollment answer carries the replicas the node was created with, for install and reenroll', async (t) => {
  for (const replicas of [3, 1]) {
    const created = await createNode(app, { replicas });
    const res = await enroll(app, created.install.token);
    t.equal(res.statusCode, 200, res.body);
    const body = res.json<{ replicas?: number }>();
    t.equal(body.replicas, replicas, `created with ${replicas}`);
    const parsed = nodeEnrollResponseSchema.safeParse(body);
    t.ok(parsed.success, 'the node takes the answer');
    t.equal(parsed.data?.replicas, replicas, 'and keeps the count');

    const reissued = await issue(app, created.node.name, 'reenroll');
    const again = await enroll(app, reissued.json<{ token: string }>().token, { mode: 'reenroll' });
    t.equal(again.statusCode, 200, again.body);
    t.equal(again.json<{ replicas?: number }>().replicas, replicas, 'a reenroll carries it too');
  }
});

t.test('a node created without replicas is answered 1', async (t) => {
  const created = await createNode(app);
  const res = await enroll(app, created.install.token);
  t.equal(res.statusCode, 200, res.body);
  t.equal(res.json<{ replicas?: number }>().replicas, 1);
});

t.test('the upgrade redemption answer carries the replicas too', async (t) => {
  const created = await createNode(app, { replicas: 4 });
  t.equal((await enroll(app, created.install.token)).statusCode, 200);
  const token = (await issue(app, created.node.name, 'upgrade')).json<{ token: string }>().token;
  const res = await app.inject({
    method: 'POST',
    url: '/api/enroll/upgrade',
    payload: { token, nodeId: created.node.id, facts: { hostname: 'edge-host-1', arch: 'x86_64', version: productVersion(), fromVersion: '0.0.9', protocolVersion: PROTOCOL_VERSION } },
  });
  t.equal(res.statusCode, 200, res.body);
  t.match(res.json(), { nodeId: created.node.id, targetVersion: productVersion(), replicas: 4 });
  const parsed = upgradeAnswerSchema.safeParse(res.json());
  t.ok(parsed.success, "the installer takes the answer");
  t.equal(parsed.data?.replicas, 4);
});

t.test("the node reads an older control plane's answer without the count as valid (the installer then writes 1)", async (t) => {
  const created = await createNode(app, { replicas: 2 });
  const res = await enroll(app, created.install.token);
  const { replicas: _dropped, ...older } = res.json<Record<string, unknown>>();
  const parsed = nodeEnrollResponseSchema.safeParse(older);
  t.ok(parsed.success);
  t.equal(parsed.data?.replicas, undefined);
});
