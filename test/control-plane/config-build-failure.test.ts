// When the control plane cannot build a node's bundle (a stored row the bundle schema refuses), the
// admin sees it on the node (configError CONFIG_BUILD_FAILED, with why) as well as in the log at
// error level; the next version that builds reaches the node and clears it. Its own database: the
// broken row would stop every other test's bundles.
import t from 'tap';
import { recordConfigChange } from '../../control-plane/src/config/config-changes.js';
import { withTransaction } from '../../control-plane/src/nodes/with-transaction.js';
import { findNodeById } from '../../control-plane/src/nodes/node-repository.js';
import { toNodeView, type NodeView } from '../../control-plane/src/nodes/node-view.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { changeConfig } from './bundle-seed.js';
import { enrolledNode, gatewayIdentity, gatewaySettings, liveSession, migratedPool, startTestGateway } from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const gateway = await startTestGateway(t, { pool, settings, identity });

async function viewOf(nodeId: string): Promise<NodeView> {
  const row = await findNodeById(pool, nodeId);
  if (row === undefined) throw new Error(`no node ${nodeId}`);
  return toNodeView(row, { offlineAfterMs: settings.nodes.offlineAfterMs });
}

t.test('a bundle the control plane cannot build shows on the node as CONFIG_BUILD_FAILED, and the next good version clears it', async (t) => {
  const node = await enrolledNode(pool, settings);
  const broken = await withTransaction(pool, async (client) => {
    const { rows } = await client.query<{ id: string }>(
      `insert into guardrail_policies (name, rules) values ('broken', '[{"detector":"nope","action":"flag","on":"both"}]') returning id`,
    );
    await recordConfigChange(client, { entity: 'guardrail-policy', entityId: rows[0]!.id, action: 'create' });
    return rows[0]!.id;
  });
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);

  const failed = await waitFor(async () => {
    const view = await viewOf(node.id);
    return view.configError !== null ? view : undefined;
  }, { what: 'the build failure on the node' });
  t.match(failed.configError, { code: 'CONFIG_BUILD_FAILED', message: /could not build this node's config bundle: .*guardrailPolicies\.0\.rules\.0\.detector/ });
  t.ok((failed.configVersionsBehind ?? 0) > 0, 'and it is behind');
  await waitFor(() => gateway.log.lines().some((l) => l.level === 50 && l.msg === 'could not build the config bundle for this node; retrying on the next change or later'),
    { what: 'the failure logged at error level' });

  await pool.query('update guardrail_policies set deleted_at = now() where id = $1', [broken]);
  const version = await changeConfig(pool);
  const push = await conn.nextConfigPush('the push of the version that builds');
  t.equal(push.version, BigInt(version));
  conn.ackConfig(push.version);
  const applied = await waitFor(async () => {
    const view = await viewOf(node.id);
    return view.appliedConfigVersion === version ? view : undefined;
  }, { what: 'the good version to be applied' });
  t.equal(applied.configError, null, 'cleared');
});
