/**
 * Redeeming an upgrade token (POST /api/enroll/upgrade, the go-ahead for `zenova install node
 * --upgrade`) against real PostgreSQL: once, only for the node installed on the host, only for the
 * control plane's own version, with enrollment's token errors; every refusal leaves the token usable.
 */
import { createHash } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import t from 'tap';
import { verifyCredential } from '../../control-plane/src/nodes/credentials.js';
import { issueInstallToken } from '../../control-plane/src/nodes/install-tokens.js';
import { parseNodeEvent } from '../../control-plane/src/nodes/node-events.js';
import { withTransaction } from '../../control-plane/src/nodes/with-transaction.js';
import { productVersion } from '../../proto/src/product-version.js';
import { PROTOCOL_VERSION } from '../../proto/src/protocol-version.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bearer, createNode, enroll, FACTS, issue, listenNodeEvents, migratedPool, nodesApp } from './nodes-harness.js';
import type { CreatedNode } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { app, log } = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 1_000 } });

interface ErrorBody { error: { code: string; type: string; message: string } }
interface Enrolled { nodeId: string; credential: { secret: string } }

const UPGRADE_FACTS = {
  hostname: 'edge-host-1', arch: 'x86_64', version: productVersion(), fromVersion: '0.0.9', protocolVersion: PROTOCOL_VERSION,
} as const;

async function upgrade(
  target: FastifyInstance,
  token: string,
  nodeId: string,
  opts: { facts?: Record<string, unknown>; remoteAddress?: string } = {},
): Promise<LightMyRequestResponse> {
  return target.inject({
    method: 'POST',
    url: '/api/enroll/upgrade',
    payload: { token, nodeId, facts: opts.facts ?? UPGRADE_FACTS },
    ...(opts.remoteAddress ? { remoteAddress: opts.remoteAddress } : {}),
  });
}

async function tokenUsed(token: string): Promise<boolean> {
  const { rows } = await pool.query<{ used: boolean }>('select used_at is not null as used from install_tokens where token_hash = $1',
    [createHash('sha256').update(token).digest()]);
  return rows[0]!.used;
}

/** A node installed on its host (enrolled), and a fresh upgrade token for it. */
async function installedNode(): Promise<{ created: CreatedNode; enrolled: Enrolled; upgradeToken: string }> {
  const created = await createNode(app);
  const enrolled = await enroll(app, created.install.token);
  if (enrolled.statusCode !== 200) throw new Error(`enrolling failed: ${enrolled.body}`);
  const issued = await issue(app, created.node.name, 'upgrade');
  return { created, enrolled: enrolled.json<Enrolled>(), upgradeToken: issued.json<{ token: string }>().token };
}

t.test('an upgrade token redeemed for its own node answers the node and the target version, once', async (t) => {
  const listener = await listenNodeEvents(t, db.url);
  const { created, enrolled, upgradeToken } = await installedNode();
  const res = await upgrade(app, upgradeToken, created.node.id);
  t.equal(res.statusCode, 200, res.body);
  t.same(res.json(), { nodeId: created.node.id, nodeName: created.node.name, targetVersion: productVersion(), replicas: 1 });
  t.equal(await tokenUsed(upgradeToken), true, 'the token is used');
  t.match(await verifyCredential(pool, enrolled.nodeId, enrolled.credential.secret), { ok: true },
    'the node keeps its identity and credential');

  const event = await waitFor(() => listener.events.find((e) => e.nodeId === created.node.id && e.type === 'upgrade-started'),
    { what: 'the upgrade-started node event', timeoutMs: 10_000 });
  const expected = { type: 'upgrade-started', nodeId: created.node.id, fromVersion: '0.0.9', toVersion: productVersion(), hostname: 'edge-host-1' };
  t.same(event, expected, 'every replica hears it, with both versions and the host');
  t.same(parseNodeEvent(JSON.stringify(event)), expected, "the gateway's listener understands it");
  const line = log.lines().find((l) => l['msg'] === 'node upgrade started (upgrade token redeemed)' && l['nodeId'] === created.node.id);
  t.match(line, { level: 30, node: created.node.name, hostname: 'edge-host-1', fromVersion: '0.0.9', toVersion: productVersion() },
    'one info line names the node and both versions');
  t.notOk(log.text().includes(upgradeToken.slice(6)), 'the token is not in the log');

  const again = await upgrade(app, upgradeToken, created.node.id);
  t.equal(again.statusCode, 409);
  t.match(again.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_TOKEN_USED', message: /already used at .*upgrade-command/ } });
});

t.test('a package of another version than the control plane\'s is refused with UPGRADE_VERSION and the token stays usable', async (t) => {
  const { created, upgradeToken } = await installedNode();
  const res = await upgrade(app, upgradeToken, created.node.id, { facts: { ...UPGRADE_FACTS, version: '9.9.9' } });
  t.equal(res.statusCode, 409);
  const { error } = res.json<ErrorBody>();
  t.match(error, { code: 'ZN_ERR_CP_UPGRADE_VERSION', type: 'conflict_error' });
  t.match(error.message, '9.9.9', 'names the package version');
  t.match(error.message, `version ${productVersion()}`, "names the control plane's version");
  t.match(error.message, /zenova-node\.zpkg of version/, 'says which package to use');
  t.equal(await tokenUsed(upgradeToken), false, 'not consumed');
  t.equal((await upgrade(app, upgradeToken, created.node.id)).statusCode, 200, 'the token still upgrades with the right package');
});

t.test('an install or reenroll token is refused with TOKEN_WRONG_KIND naming the upgrade command, and still enrolls', async (t) => {
  const created = await createNode(app);
  const res = await upgrade(app, created.install.token, created.node.id);
  t.equal(res.statusCode, 400);
  t.match(res.json<ErrorBody>(), {
    error: { code: 'ZN_ERR_CP_TOKEN_WRONG_KIND', message: /^This is an install token; an upgrade needs an upgrade command: `zenova gateway-node upgrade-command NAME`, or node detail › Issue upgrade command/ },
  });
  t.equal(await tokenUsed(created.install.token), false, 'not consumed');
  t.equal((await enroll(app, created.install.token)).statusCode, 200, 'the install token still enrolls');

  const reenroll = (await issue(app, created.node.name, 'reenroll')).json<{ token: string }>().token;
  const asUpgrade = await upgrade(app, reenroll, created.node.id);
  t.equal(asUpgrade.statusCode, 400);
  t.match(asUpgrade.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_TOKEN_WRONG_KIND', message: /^This is a reenroll token; an upgrade needs/ } });
  t.equal((await enroll(app, reenroll, { mode: 'reenroll' })).statusCode, 200, 'the reenroll token still re-enrolls');
});

t.test('a token of another node is refused with TOKEN_WRONG_NODE without naming that node, and stays usable', async (t) => {
  const a = await installedNode();
  const b = await installedNode();
  const res = await upgrade(app, a.upgradeToken, b.created.node.id);
  t.equal(res.statusCode, 403);
  t.match(res.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_TOKEN_WRONG_NODE', type: 'permission_error', message: /another node than the one installed on this host/ } });
  t.notOk(res.body.includes(a.created.node.name) || res.body.includes(a.created.node.id), "the token's node is not revealed");
  t.equal(await tokenUsed(a.upgradeToken), false, 'not consumed: the redemption rolled back');
  t.equal((await upgrade(app, a.upgradeToken, a.created.node.id)).statusCode, 200, "the token still upgrades its own node");
});

t.test('an expired upgrade token is refused with TOKEN_EXPIRED, a superseded one with TOKEN_SUPERSEDED', async (t) => {
  const { created, upgradeToken } = await installedNode();
  const hourAgo = new Date(Date.now() - 3_600_000);
  const expired = await withTransaction(pool, (client) => issueInstallToken(client, created.node.id, 'upgrade', 60_000, hourAgo));
  const res = await upgrade(app, expired!.token, created.node.id);
  t.equal(res.statusCode, 401);
  t.match(res.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_TOKEN_EXPIRED', message: /expired at .*upgrade-command/ } });

  // Issuing `expired` invalidated the earlier open upgrade token of the node.
  const superseded = await upgrade(app, upgradeToken, created.node.id);
  t.equal(superseded.statusCode, 401);
  t.match(superseded.json<ErrorBody>(), {
    error: { code: 'ZN_ERR_CP_TOKEN_SUPERSEDED', type: 'authentication_error', message: `The token was replaced by a newer command issued at ${hourAgo.toISOString()}; run the newest command.` },
  });
  t.equal(await tokenUsed(upgradeToken), false);
});

t.test('an upgrade token of a deleted node is refused with NODE_DELETED', async (t) => {
  const { created, upgradeToken } = await installedNode();
  t.equal((await app.inject({ method: 'DELETE', url: `/api/v1/nodes/${created.node.name}`, headers: bearer })).statusCode, 200);
  const res = await upgrade(app, upgradeToken, created.node.id);
  t.equal(res.statusCode, 410);
  t.equal(res.json<ErrorBody>().error.code, 'ZN_ERR_CP_NODE_DELETED');
});

t.test('an unknown token is refused with TOKEN_UNKNOWN and not echoed', async (t) => {
  const { created } = await installedNode();
  const token = `zn_it_${'U'.repeat(43)}`;
  const res = await upgrade(app, token, created.node.id);
  t.equal(res.statusCode, 401);
  t.equal(res.json<ErrorBody>().error.code, 'ZN_ERR_CP_TOKEN_UNKNOWN');
  t.notOk(res.body.includes(token));
});

t.test('an incompatible protocol version is refused before the token is touched', async (t) => {
  const { created, upgradeToken } = await installedNode();
  const res = await upgrade(app, upgradeToken, created.node.id, { facts: { ...UPGRADE_FACTS, protocolVersion: PROTOCOL_VERSION + 1 } });
  t.equal(res.statusCode, 400);
  t.match(res.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_PROTOCOL_INCOMPATIBLE', message: /protocol mismatch.*upgrade this side/ } });
  t.equal(await tokenUsed(upgradeToken), false);
});

t.test('upgrade bodies are validated strictly, bounded and size-limited', async (t) => {
  const ok = { token: 'x', nodeId: 'n', facts: UPGRADE_FACTS };
  const cases: Array<[string, unknown, RegExp]> = [
    ['an unknown top-level field', { ...ok, extra: 1 }, /extra|[Uu]nrecognized/],
    ['an unknown fact', { ...ok, facts: { ...UPGRADE_FACTS, extra: 1 } }, /extra|[Uu]nrecognized/],
    ["enrollment's mode", { ...ok, mode: 'install' }, /mode|[Uu]nrecognized/],
    ['no nodeId', { token: 'x', facts: UPGRADE_FACTS }, /nodeId/],
    ['an empty nodeId', { ...ok, nodeId: '' }, /nodeId/],
    ['a nodeId of 129 characters', { ...ok, nodeId: 'n'.repeat(129) }, /nodeId/],
    ['a token of 257 characters', { ...ok, token: 'x'.repeat(257) }, /token/],
    ['a fromVersion that is no version', { ...ok, facts: { ...UPGRADE_FACTS, fromVersion: 'v 1' } }, /facts\.fromVersion/],
    ['a fromVersion of 65 characters', { ...ok, facts: { ...UPGRADE_FACTS, fromVersion: '1'.repeat(65) } }, /facts\.fromVersion/],
    ['a hostname that is no host name', { ...ok, facts: { ...UPGRADE_FACTS, hostname: 'bad host' } }, /facts\.hostname/],
    ["enrollment's facts (no fromVersion)", { ...ok, facts: FACTS }, /facts\.fromVersion/],
  ];
  for (const [what, payload, message] of cases) {
    const res = await app.inject({ method: 'POST', url: '/api/enroll/upgrade', payload: payload as object });
    t.equal(res.statusCode, 400, what);
    t.match(res.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message } }, what);
  }
  const huge = await app.inject({ method: 'POST', url: '/api/enroll/upgrade', payload: { ...ok, facts: { ...UPGRADE_FACTS, hostname: 'h'.repeat(20_000) } } });
  t.equal(huge.statusCode, 413);
  t.match(huge.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_BODY_TOO_LARGE', message: /limit of 8 KiB/ } });
});

t.test('upgrade attempts share the per-IP enrollment budget, malformed ones counted too', async (t) => {
  const limited = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 3 } });
  const created = await createNode(limited.app);
  t.equal((await enroll(limited.app, created.install.token, { remoteAddress: '10.9.8.1' })).statusCode, 200, 'an enrollment costs one');
  const upgradeToken = (await issue(limited.app, created.node.name, 'upgrade')).json<{ token: string }>().token;
  const malformed = await limited.app.inject({ method: 'POST', url: '/api/enroll/upgrade', payload: { nonsense: true }, remoteAddress: '10.9.8.1' });
  t.equal(malformed.statusCode, 400, 'a malformed upgrade is let through (and fails on its merits)');
  t.equal((await upgrade(limited.app, `zn_it_guess`, created.node.id, { remoteAddress: '10.9.8.1' })).statusCode, 401);
  const blocked = await upgrade(limited.app, upgradeToken, created.node.id, { remoteAddress: '10.9.8.1' });
  t.equal(blocked.statusCode, 429, 'the fourth attempt in the minute is refused, even with a good token');
  t.match(blocked.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_ENROLL_RATE_LIMITED' } });
  t.ok(Number(blocked.headers['retry-after']) >= 1, 'with Retry-After');
  t.equal(await tokenUsed(upgradeToken), false);
  t.equal((await upgrade(limited.app, upgradeToken, created.node.id, { remoteAddress: '10.9.8.2' })).statusCode, 200,
    'another address has its own budget');
});

t.test('a control-plane process without a node gateway still redeems upgrade tokens', async (t) => {
  const bare = await nodesApp(t, db.url, { enrollment: null, nodes: { enrollAttemptsPerMinute: 1_000 } });
  const { created, upgradeToken } = await installedNode();
  const res = await upgrade(bare.app, upgradeToken, created.node.id);
  t.equal(res.statusCode, 200, res.body);
});
