/**
 * The enrollment answer against real PostgreSQL: without a gateway CA (external gateway certificate,
 * no ZENOVA_GATEWAY_TRUST_BUNDLE) it carries caPem '' and enrolls; an answer the node would refuse
 * is never handed out, and costs neither the token nor the node's current credentials.
 */
import { createHash } from 'node:crypto';
import t from 'tap';
import { verifyCredential } from '../../control-plane/src/nodes/credentials.js';
import type { EnrollmentDeps } from '../../control-plane/src/nodes/enrollment.js';
import { testDatabase } from '../fixtures/postgres.js';
import { createNode, enroll, issue, migratedPool, nodesApp, STUB_GATEWAY, STUB_SIGNING_KEY_PEM } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { app } = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 1_000 } });

interface Enrolled { nodeId: string; credential: { secret: string }; gateway: { target: string; serverName: string; caPem: string } }

async function tokenUsed(token: string): Promise<boolean> {
  const { rows } = await pool.query<{ used: boolean }>('select used_at is not null as used from install_tokens where token_hash = $1',
    [createHash('sha256').update(token).digest()]);
  return rows[0]!.used;
}

function deps(gateway: { target: string; serverName: string; caPem: string }, signingKey = STUB_SIGNING_KEY_PEM): EnrollmentDeps {
  return { gatewayInfo: async () => gateway, configSigningPublicKeyPem: async () => signingKey };
}

t.test('without a gateway CA the answer carries caPem empty and the node enrolls', async (t) => {
  const systemTrust = await nodesApp(t, db.url, { enrollment: deps({ ...STUB_GATEWAY, caPem: '' }) });
  const created = await createNode(systemTrust.app);
  const res = await enroll(systemTrust.app, created.install.token);
  t.equal(res.statusCode, 200, res.body);
  t.same(res.json<Enrolled>().gateway, { target: STUB_GATEWAY.target, serverName: STUB_GATEWAY.serverName, caPem: '' }, "'' = no pinned CA: the node uses its system trust store");
});

const unusable: Array<{ what: string; deps: EnrollmentDeps; field: RegExp }> = [
  { what: 'a gateway CA that is not a certificate', deps: deps({ ...STUB_GATEWAY, caPem: '-----BEGIN CERTIFICATE-----\nnot-a-cert\n-----END CERTIFICATE-----\n' }), field: /gateway\.caPem/ },
  { what: 'a gateway target that is not HOST:PORT', deps: deps({ ...STUB_GATEWAY, target: 'gateway.zenova.test' }), field: /gateway\.target/ },
  { what: 'an empty server name', deps: deps({ ...STUB_GATEWAY, serverName: '' }), field: /gateway\.serverName/ },
  { what: 'a config-signing key that is not a public key', deps: deps({ ...STUB_GATEWAY }, 'x'), field: /configSigningPublicKeyPem/ },
];

for (const c of unusable) {
  t.test(`an answer with ${c.what} is refused with 503 before the token is used, and the token still works afterwards`, async (t) => {
    const broken = await nodesApp(t, db.url, { enrollment: c.deps });
    const created = await createNode(broken.app);
    const res = await enroll(broken.app, created.install.token);
    t.equal(res.statusCode, 503, res.body);
    t.match(res.json<{ error: { code: string; message: string } }>().error, { code: 'ZN_ERR_CP_ENROLLMENT_UNAVAILABLE', message: c.field });
    t.match(res.json<{ error: { message: string } }>().error.message, /the node refuses .*the token was not used/);
    t.equal(await tokenUsed(created.install.token), false, 'the token is not burnt');
    t.equal((await enroll(app, created.install.token)).statusCode, 200, 'the same token enrolls once the answer is usable');
  });
}

t.test('a reenroll whose answer the node would refuse leaves the running node its credential', async (t) => {
  const created = await createNode(app);
  const first = (await enroll(app, created.install.token)).json<Enrolled>();
  const reenroll = await issue(app, created.node.name, 'reenroll');
  const token = reenroll.json<{ token: string }>().token;
  const broken = await nodesApp(t, db.url, { enrollment: deps({ ...STUB_GATEWAY, caPem: 'junk' }) });
  const res = await enroll(broken.app, token, { mode: 'reenroll' });
  t.equal(res.statusCode, 503, res.body);
  t.match(await verifyCredential(pool, first.nodeId, first.credential.secret), { ok: true }, 'not locked out');
  t.equal(await tokenUsed(token), false);
});
