/**
 * Retrying a redemption whose answer was lost, against real PostgreSQL: the same token with the same
 * redemption key is answered again (same node, gateway and signing key, a new credential that
 * replaces the lost one) within the retry window and until the node connects; anything else is
 * refused as a used token, exactly as before.
 */
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { acknowledgeCredential, verifyCredential } from '../../control-plane/src/nodes/credentials.js';
import { enrollNode } from '../../control-plane/src/nodes/enrollment.js';
import { ENROLL_RETRY_WINDOW_MS } from '../../control-plane/src/nodes/install-tokens.js';
import { testDatabase } from '../fixtures/postgres.js';
import { createNode, FACTS, issue, migratedPool, nodesApp, STUB_GATEWAY, STUB_SIGNING_KEY_PEM, stubEnrollment } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { app, pool, settings, log } = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 1_000 } });
const timings = {
  validityMs: settings.nodes.credentialValidityMs,
  rotateAfterMs: settings.nodes.credentialRotateAfterMs,
  handoverMs: settings.nodes.credentialHandoverMs,
};

interface Enrolled {
  nodeId: string; nodeName: string;
  credential: { id: string; secret: string; expiresAt: string };
  gateway: typeof STUB_GATEWAY; configSigningPublicKeyPem: string; controlPlaneUrl: string;
}
interface ErrorBody { error: { code: string; message: string } }

const newKey = (): string => randomBytes(32).toString('base64url');

async function redeem(token: string, redemptionKey: string | undefined, mode: 'install' | 'reenroll' = 'install') {
  return app.inject({
    method: 'POST',
    url: '/api/enroll',
    payload: { token, mode, facts: FACTS, ...(redemptionKey !== undefined ? { redemptionKey } : {}) },
  });
}

async function liveNodesNamed(name: string): Promise<number> {
  const { rows } = await pool.query<{ n: string }>('select count(*) as n from nodes where name = $1 and deleted_at is null', [name]);
  return Number(rows[0]!.n);
}

t.test('a lost answer is answered again for the same key: same node, new credential, the lost one stops working', async (t) => {
  const created = await createNode(app);
  const key = newKey();
  const first = await redeem(created.install.token, key);
  t.equal(first.statusCode, 200, first.body);
  const lost = first.json<Enrolled>();
  // The answer never reached the node: it runs the same command again, with the same key.
  const again = await redeem(created.install.token, key);
  t.equal(again.statusCode, 200, again.body);
  const second = again.json<Enrolled>();
  t.equal(second.nodeId, lost.nodeId, 'the same node id');
  t.equal(second.nodeName, lost.nodeName, 'the same node name');
  t.same(second.gateway, STUB_GATEWAY, 'the same gateway material');
  t.equal(second.configSigningPublicKeyPem, STUB_SIGNING_KEY_PEM);
  t.equal(second.controlPlaneUrl, lost.controlPlaneUrl);
  t.not(second.credential.id, lost.credential.id, 'a newly issued credential');
  t.match(await verifyCredential(pool, lost.nodeId, lost.credential.secret), { ok: false, code: 'CREDENTIAL_REVOKED' }, 'the lost credential is refused');
  t.match(await verifyCredential(pool, second.nodeId, second.credential.secret), { ok: true, isNewest: true }, 'the new one works');
  t.equal(await liveNodesNamed(created.node.name), 1, 'exactly one node');
  const logged = log.text();
  t.match(logged, /node enrolled again/, 'the retry is logged');
  for (const secret of [created.install.token, key, lost.credential.secret, second.credential.secret]) {
    t.notOk(logged.includes(secret), 'no token, redemption key or credential in the log');
  }
});

t.test('the same token with another key, or with none, is refused as a used token', async (t) => {
  const created = await createNode(app);
  const key = newKey();
  t.equal((await redeem(created.install.token, key)).statusCode, 200);
  for (const other of [newKey(), undefined]) {
    const res = await redeem(created.install.token, other);
    t.equal(res.statusCode, 409, res.body);
    t.equal(res.json<ErrorBody>().error.code, 'ZN_ERR_CP_TOKEN_USED', other === undefined ? 'no key' : 'another key');
  }
  // A token first redeemed without a key (an older node) has no retry at all.
  const old = await createNode(app);
  t.equal((await redeem(old.install.token, undefined)).statusCode, 200);
  t.equal((await redeem(old.install.token, key)).json<ErrorBody>().error.code, 'ZN_ERR_CP_TOKEN_USED');
});

t.test('after the retry window the same key is refused as a used token', async (t) => {
  const created = await createNode(app);
  const key = newKey();
  const firstAt = new Date();
  const request = { token: created.install.token, mode: 'install' as const, facts: { ...FACTS }, redemptionKey: key };
  const first = await enrollNode(pool, request, stubEnrollment, timings, firstAt);
  const late = enrollNode(pool, request, stubEnrollment, timings, new Date(firstAt.getTime() + ENROLL_RETRY_WINDOW_MS));
  await t.rejects(late, { code: 'ZN_ERR_CP_TOKEN_USED' });
  t.match(await verifyCredential(pool, first.nodeId, first.credential.secret), { ok: true }, 'the first credential is untouched');
  const inTime = await enrollNode(pool, request, stubEnrollment, timings, new Date(firstAt.getTime() + ENROLL_RETRY_WINDOW_MS - 1000));
  t.equal(inTime.nodeId, first.nodeId, 'just inside the window it is still answered');
});

t.test('once the node connected with its credential, the same key is refused as a used token', async (t) => {
  const created = await createNode(app);
  const key = newKey();
  const first = (await redeem(created.install.token, key)).json<Enrolled>();
  // What the gateway records when a node authenticates with a credential (session.authenticate).
  await acknowledgeCredential(pool, first.nodeId, first.credential.id, timings);
  const res = await redeem(created.install.token, key);
  t.equal(res.statusCode, 409, res.body);
  t.equal(res.json<ErrorBody>().error.code, 'ZN_ERR_CP_TOKEN_USED');
  t.match(await verifyCredential(pool, first.nodeId, first.credential.secret), { ok: true }, 'the connected credential keeps working');
});

t.test('--reenroll: a retry replaces the re-issued credential; the old host credential stays revoked', async (t) => {
  const created = await createNode(app);
  const installed = (await redeem(created.install.token, newKey())).json<Enrolled>();
  await acknowledgeCredential(pool, installed.nodeId, installed.credential.id, timings);
  const reenroll = (await issue(app, created.node.name, 'reenroll')).json<{ token: string }>().token;
  const key = newKey();
  const lost = (await redeem(reenroll, key, 'reenroll')).json<Enrolled>();
  const again = await redeem(reenroll, key, 'reenroll');
  t.equal(again.statusCode, 200, again.body);
  const second = again.json<Enrolled>();
  t.equal(second.nodeId, installed.nodeId);
  t.match(await verifyCredential(pool, installed.nodeId, installed.credential.secret), { ok: false, code: 'CREDENTIAL_REVOKED' });
  t.match(await verifyCredential(pool, lost.nodeId, lost.credential.secret), { ok: false, code: 'CREDENTIAL_REVOKED' });
  t.match(await verifyCredential(pool, second.nodeId, second.credential.secret), { ok: true });
  t.equal((await redeem(reenroll, newKey(), 'reenroll')).json<ErrorBody>().error.code, 'ZN_ERR_CP_TOKEN_USED');
});

t.test('a malformed redemption key is refused by the body schema and burns nothing', async (t) => {
  const created = await createNode(app);
  for (const bad of ['short', 'x'.repeat(44), `${'a'.repeat(42)}=`, 42]) {
    const res = await app.inject({ method: 'POST', url: '/api/enroll', payload: { token: created.install.token, mode: 'install', facts: FACTS, redemptionKey: bad } });
    t.equal(res.statusCode, 400, `${String(bad)}: ${res.body}`);
  }
  t.equal((await redeem(created.install.token, newKey())).statusCode, 200, 'the token is still usable');
});
