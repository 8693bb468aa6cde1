/**
 * A token replaced by a newer command, end to end: the real control plane (real PostgreSQL, over
 * HTTPS) refuses it as ZN_ERR_CP_TOKEN_SUPERSEDED, not as expired, and both the node's enrollment
 * and the installer's upgrade-token redemption say when the newer command was issued and to run it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { listenConsole } from '../../control-plane/src/tls/console-server.js';
import { enroll as enrollNode } from '../../edge-node/src/enroll/enroll.js';
import { EnrollError } from '../../edge-node/src/enroll/enroll-errors.js';
import { redeemUpgradeToken } from '../../installer/src/install/upgrade-token.js';
import { productVersion } from '../../proto/src/product-version.js';
import { testDatabase } from '../fixtures/postgres.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';
import { createNode, enroll, issue, migratedPool, nodesApp } from '../control-plane/nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { app, pool } = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 1_000 } });
const ca = await createTestCa();
const cert = await issueServerCert(ca, { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
const listener = await listenConsole(app, { host: '127.0.0.1', port: 0 }, { certPem: cert.certPem, keyPem: cert.keyPem });
t.teardown(() => listener.close());

/** The time the newest command of `kind` was issued for the node, as the control plane stored it. */
async function replacedAt(nodeId: string, kind: string): Promise<string> {
  const { rows } = await pool.query<{ created_at: Date }>(
    'select created_at from install_tokens where node_id = $1 and kind = $2 order by created_at desc limit 1', [nodeId, kind]);
  return rows[0]!.created_at.toISOString();
}

async function refusalOf(run: () => Promise<unknown>): Promise<EnrollError> {
  try {
    await run();
  } catch (err) {
    if (err instanceof EnrollError) return err;
    throw err;
  }
  throw new Error('expected the token to be refused');
}

const escaped = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

t.test('enrolling with an install token a newer install command replaced says when that command was issued and to run it', async (t) => {
  const created = await createNode(app);
  t.equal((await issue(app, created.node.name, 'install')).statusCode, 200, 'a colleague issued the install command again');
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'zn-superseded-'));
  t.teardown(() => rmSync(stateDir, { recursive: true, force: true }));

  const err = await refusalOf(() => enrollNode({ controlPlaneUrl: listener.url, token: created.install.token, stateDir, caPem: ca.certPem, reenroll: false }));
  t.equal(err.code, 'ZN_ERR_CP_TOKEN_SUPERSEDED');
  const at = await replacedAt(created.node.id, 'install');
  t.match(err.message, new RegExp(`^the token was replaced by a newer command issued at ${escaped(at)}: run the newest command`));
  t.notMatch(err.message, /expired|24 hours/, 'not reported as expired');
  t.notOk(err.message.includes(created.install.token), 'the token is not printed');
});

t.test('an upgrade token a newer upgrade command replaced is reported the same way by the installer', async (t) => {
  const created = await createNode(app);
  const enrolled = await enroll(app, created.install.token);
  t.equal(enrolled.statusCode, 200, 'the node is installed');
  const first = (await issue(app, created.node.name, 'upgrade')).json<{ token: string }>().token;
  t.equal((await issue(app, created.node.name, 'upgrade')).statusCode, 200, 'the upgrade command issued again');

  const err = await refusalOf(() => redeemUpgradeToken({
    controlPlaneUrl: listener.url, caPem: ca.certPem, token: first, nodeId: created.node.id, fromVersion: '0.0.9', toVersion: productVersion(),
  }));
  t.equal(err.code, 'ZN_ERR_CP_TOKEN_SUPERSEDED');
  const at = await replacedAt(created.node.id, 'upgrade');
  t.match(err.message, new RegExp(`^the token was replaced by a newer command issued at ${escaped(at)}: run the newest command .*upgrade-command NAME`));
  t.notMatch(err.message, /expired|24 hours/);
});
